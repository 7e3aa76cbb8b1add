"""A new conversation and its first messages stored in one SQL statement.

A first message is the chat's most common write. Through the ORM it is two INSERTs
(``Conversation.objects.create``, ``Message.objects.bulk_create``), and most of their
cost is Python building the SQL, not PostgreSQL running it
(bench/results/2026-12-04-turn-profile.md). :func:`thread_insert` sends the same rows
as one statement (the conversation's INSERT in a ``WITH`` clause, the messages' in the
main one) whose text is built once per process from the models' fields, so a field
added to either model is written without a change here; the values are what the ORM
would write (each field's ``pre_save`` and ``get_db_prep_save``).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from django.db import connection
from django.db.models import Field, Model

from conversations.models import Conversation, Message


@functools.cache
def _columns(model: type[Model]) -> list[Field]:
    """The fields an INSERT of ``model`` writes: its concrete ones the database does
    not generate (as the ORM's own INSERT)."""
    return [f for f in model._meta.local_concrete_fields if not f.generated]


@functools.cache
def _sql(messages: int) -> str:
    """The statement inserting a conversation and ``messages`` messages (``%s``
    parameters: the conversation's values, then each message's)."""
    quote = connection.ops.quote_name

    def insert(model: type[Model], rows: int) -> str:
        fields = _columns(model)
        names = ", ".join(quote(str(f.column)) for f in fields)
        row = "(" + ", ".join(["%s"] * len(fields)) + ")"
        values = ", ".join([row] * rows)
        return f"INSERT INTO {quote(model._meta.db_table)} ({names}) VALUES {values}"

    return f"WITH thread AS ({insert(Conversation, 1)}) {insert(Message, messages)}"


def _values(instance: Model) -> list[Any]:
    return [
        f.get_db_prep_save(f.pre_save(instance, True), connection)
        for f in _columns(type(instance))
    ]


def thread_insert(conversation: Conversation, messages: Sequence[Message]) -> None:
    """Insert ``conversation`` and ``messages`` (unsaved, with their primary keys set,
    as the models' defaults do; at least one message) in one statement, and mark them
    saved (a later ``save()`` updates them). Call inside a transaction when the
    rows refer to each other (their foreign keys are checked at commit)."""
    params = _values(conversation)
    for message in messages:
        params.extend(_values(message))
    with connection.cursor() as cursor:
        cursor.execute(_sql(len(messages)), params)
    for row in (conversation, *messages):
        row._state.adding = False
        row._state.db = connection.alias
