"""A first message's rows in one statement (conversations/services/turns/rows_sql.py):
the conversation and its messages stored as the ORM would store them, and the
objects marked saved."""

from __future__ import annotations

import uuid

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from conversations.models import Conversation, Message
from conversations.services.turns.rows_sql import thread_insert

pytestmark = pytest.mark.django_db


def _fields(model):
    return [f for f in model._meta.local_concrete_fields if not f.generated]


def test_a_new_thread_is_stored_in_one_statement_as_the_orm_would_store_it(user):
    leaf = uuid.uuid4()
    thread = Conversation(
        user=user, title="Tea in Kyoto", doc_scope="none", current_leaf_id=leaf
    )
    asked = Message(conversation=thread, role=Message.Role.USER, content="Tea?")
    answer = Message(
        id=leaf,
        conversation=thread,
        role=Message.Role.ASSISTANT,
        status=Message.Status.STREAMING,
        parent=asked,
        pool="chat",
        memory_unavailable=True,
    )
    with CaptureQueriesContext(connection) as queries, transaction.atomic():
        thread_insert(thread, [asked, answer])
    inserts = [q["sql"] for q in queries.captured_queries if "INSERT" in q["sql"]]
    assert len(inserts) == 1, inserts
    assert 'INSERT INTO "conversations_conversation"' in inserts[0]
    assert 'INSERT INTO "conversations_message"' in inserts[0]
    for row in (thread, asked, answer):
        stored = type(row).objects.get(pk=row.pk)
        for field in _fields(type(row)):
            assert getattr(stored, field.attname) == getattr(row, field.attname), (
                type(row).__name__,
                field.name,
            )
        assert not row._state.adding and row._state.db == "default"
    stored_thread = Conversation.objects.get(pk=thread.pk)
    assert stored_thread.current_leaf_id == answer.id
    assert list(stored_thread.messages.order_by("created_at")) == [asked, answer]
    assert Message.objects.get(pk=answer.pk).tool_calls == []
    assert Message.objects.get(pk=answer.pk).tool_detail == {}
    # the generated search vector is PostgreSQL's, from the stored title
    assert Conversation.objects.filter(
        pk=thread.pk, search_vector__isnull=False
    ).exists()
    # marked saved: a later save() updates the row instead of inserting it again
    thread.title = "Green tea"
    thread.save()
    answer.content = "Yes."
    answer.save()
    assert Conversation.objects.get(pk=thread.pk).title == "Green tea"
    assert Message.objects.get(pk=answer.pk).content == "Yes."
    assert Conversation.objects.count() == 1 and Message.objects.count() == 2


def test_text_and_json_values_are_stored_exactly_as_given(user):
    thread = Conversation(user=user, title='A "quoted" title')
    text = 'Back\\slash, "quotes", \'single\', tab\t, line\nbreak, é 日本 🍵, {"x": 1}'
    asked = Message(conversation=thread, role=Message.Role.USER, content=text)
    calls = [{"id": "c1", "function": {"name": "search", "arguments": '{"q": "é"}'}}]
    answer = Message(
        conversation=thread,
        role=Message.Role.ASSISTANT,
        parent=asked,
        tool_calls=calls,
        tool_detail={"nested": [1, 2.5, None, True, "x"]},
        token_count=7,
    )
    with transaction.atomic():
        thread_insert(thread, [asked, answer])
    assert Conversation.objects.get(pk=thread.pk).title == 'A "quoted" title'
    assert Message.objects.get(pk=asked.pk).content == text
    stored = Message.objects.get(pk=answer.pk)
    assert stored.tool_calls == calls
    assert stored.tool_detail == {"nested": [1, 2.5, None, True, "x"]}
    assert stored.token_count == 7
    assert stored.created_at == answer.created_at  # to the microsecond
