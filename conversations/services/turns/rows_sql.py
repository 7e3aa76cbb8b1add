"""A new conversation and its first messages stored in one SQL statement.

A first message is the chat's most common write. Through the ORM it is two INSERTs
(``Conversation.objects.create``, ``Message.objects.bulk_create``), and most of their
cost is Python building the SQL, not PostgreSQL running it
(bench/results/2026-12-04-turn-profile.md). :func:`thread_insert` sends the same rows
as one statement (the conversation's INSERT in a ``WITH`` clause, the messages' in the
main one) whose text is built once per process from the models' fields, so a field
added to either model is written without a change here; the values are what the ORM
would write (each field's ``pre_save`` and ``get_db_prep_save``).

The messages travel as one JSON parameter (an array of objects, one per message,
read back into the table's row type by PostgreSQL's ``json_populate_recordset``):
the statement so has few parameters whatever the number of columns, and psycopg
reuses its parse of the statement's text (it caches statements of at most 50
parameters; the conversation and two messages as columns were 60, whose text
psycopg split again on every call: bench/results/2026-12-05-turn3.md).
"""

from __future__ import annotations

import datetime
import functools
import json
import uuid
from collections.abc import Sequence
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connection, connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import Field, JSONField, Model
from psycopg.types.json import Jsonb

from conversations.models import Conversation, Message


@functools.cache
def _columns(model: type[Model]) -> list[Field]:
    """The fields an INSERT of ``model`` writes: its concrete ones the database does
    not generate (as the ORM's own INSERT)."""
    return [f for f in model._meta.local_concrete_fields if not f.generated]


@functools.cache
def _sql() -> str:
    """The statement inserting a conversation (one ``%s`` per column) and its
    messages (one ``%s``: a JSON array of objects keyed by column)."""
    quote = connection.ops.quote_name
    thread = _columns(Conversation)
    thread_names = ", ".join(quote(str(f.column)) for f in thread)
    thread_values = ", ".join(["%s"] * len(thread))
    names = ", ".join(quote(str(f.column)) for f in _columns(Message))
    table = quote(Message._meta.db_table)
    return (
        f"WITH thread AS (INSERT INTO {quote(Conversation._meta.db_table)} "
        f"({thread_names}) VALUES ({thread_values})) "
        f"INSERT INTO {table} ({names}) SELECT {names} "
        f"FROM json_populate_recordset(NULL::{table}, %s::json)"
    )


def _values(instance: Model, db: BaseDatabaseWrapper) -> list[Any]:
    return [
        f.get_db_prep_save(f.pre_save(instance, True), db)
        for f in _columns(type(instance))
    ]


def _json_value(value: Any) -> Any:
    """A value :func:`_values` gives that JSON has no type for, as PostgreSQL reads
    it for its column (raises TypeError for a type not listed: a new kind of field
    needs a rule here, which tests/conversations/test_rows_sql.py shows)."""
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, datetime.datetime | datetime.date):
        return value.isoformat()
    if isinstance(value, Jsonb):  # a JSONField's value: stored as this JSON itself
        return value.obj
    raise TypeError(f"No JSON form for {type(value).__name__} in thread_insert.")


@functools.cache
def _message_keys() -> tuple[str, ...]:
    fields = _columns(Message)
    for f in fields:
        if isinstance(f, JSONField) and f.encoder is not None:
            raise TypeError(f"{f.name}: a JSONField with an encoder of its own.")
    return tuple(str(f.column) for f in fields)


def thread_insert(conversation: Conversation, messages: Sequence[Message]) -> None:
    """Insert ``conversation`` and ``messages`` (unsaved, with their primary keys set,
    as the models' defaults do; at least one message) in one statement, and mark them
    saved (a later ``save()`` updates them). Call inside a transaction when the
    rows refer to each other (their foreign keys are checked at commit)."""
    keys = _message_keys()
    # the wrapper itself, not django.db.connection's proxy: the fields' conversions
    # read it some 150 times per call, each a context-local look-up through the proxy
    db = connections[DEFAULT_DB_ALIAS]
    rows = [dict(zip(keys, _values(m, db), strict=True)) for m in messages]
    params = _values(conversation, db)
    params.append(json.dumps(rows, default=_json_value))
    with db.cursor() as cursor:
        cursor.execute(_sql(), params)
    for row in (conversation, *messages):
        row._state.adding = False
        row._state.db = db.alias
