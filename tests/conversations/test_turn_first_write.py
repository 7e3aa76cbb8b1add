"""A new conversation's plain first message is one statement, stored without a
transaction around it (conversations/services/turns/rows.py ``rows_one_statement``,
gateway/generations/start.py ``store_atomic``): its rows all or none, its remembered
fact still queued once they are stored, its reservation given back when the
statement fails."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from django.db import connection, transaction

from conversations import services
from conversations.models import Conversation, Message
from conversations.services.scope import Scope
from conversations.services.turns import rows, rows_sql
from conversations.services.turns.request import TurnRequest
from inference import keys
from inference.connections import redis_sync
from memory import tasks as memory_tasks
from memory.assembly import Passage
from memory.context import BuiltContext
from tests.conftest import fake_heartbeat

pytestmark = pytest.mark.django_db(transaction=True)


def _reservations() -> list[str]:
    return list(keys.scan_iter_all(redis_sync(), keys.RESERVATION_KEY_PATTERN))


def _insert_spy(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Whether each thread_insert ran inside an atomic block."""
    seen: list[bool] = []
    real = rows_sql.thread_insert

    def spy(*args: Any, **kwargs: Any) -> None:
        seen.append(connection.in_atomic_block)
        real(*args, **kwargs)

    monkeypatch.setattr(rows, "thread_insert", spy)
    return seen


def test_a_plain_first_message_is_stored_without_a_transaction(
    user, monkeypatch, enqueued
):
    fake_heartbeat()
    seen = _insert_spy(monkeypatch)
    turn = services.turn_start(user=user, content="Hello there")
    assert seen == [False]
    conversation = Conversation.objects.get(pk=turn.conversation.pk)
    assert conversation.current_leaf_id == turn.assistant_message.id
    assert [m.role for m in conversation.messages.order_by("created_at")] == [
        "user",
        "assistant",
    ]
    assert enqueued == [str(turn.assistant_message.id)]


def test_a_remembered_fact_is_queued_after_the_rows_without_a_transaction(
    user, monkeypatch
):
    fake_heartbeat()
    seen = _insert_spy(monkeypatch)
    queued: list[tuple[Any, ...]] = []

    def delay(*args: Any) -> None:
        # the rows are there when the task is queued, as on commit
        assert Message.objects.filter(pk=args[2]).exists()
        queued.append(args)

    monkeypatch.setattr(memory_tasks.remember_fact, "delay", delay)
    turn = services.turn_start(user=user, content="Remember that I like tea.")
    assert seen == [False]
    assert queued == [(user.pk, "I like tea", str(turn.user_message.id))]


def test_a_failing_statement_leaves_nothing_stored_nor_reserved(user, monkeypatch):
    fake_heartbeat()
    real = rows.assistant_new

    def stray(**kwargs: Any) -> Message:
        answer = real(**kwargs)
        answer.id = uuid.uuid4()  # the conversation's leaf now names no row
        return answer

    monkeypatch.setattr(rows, "assistant_new", stray)
    with pytest.raises(Exception, match="current_leaf"):
        services.turn_start(user=user, content="Hello there")
    assert not Conversation.objects.exists()
    assert not Message.objects.exists()
    assert _reservations() == []


def test_a_first_message_inside_a_callers_transaction_is_refused_as_before(user):
    """The lifecycle's store may not run inside a transaction (its rows must be
    committed before the job is submitted): durable still refuses that."""
    fake_heartbeat()
    with pytest.raises(RuntimeError, match="durable"), transaction.atomic():
        services.turn_start(user=user, content="Hello there")
    assert not Conversation.objects.exists()
    assert _reservations() == []


def _turn(user: Any, conversation: Any = None) -> TurnRequest:
    return TurnRequest(user=user, conversation=conversation, content="hi")


def test_only_a_first_message_with_nothing_else_to_write_skips_the_transaction(user):
    plain, quoted = (
        BuiltContext(messages=[], prompt_tokens=1),
        BuiltContext(
            messages=[], prompt_tokens=1, passages=[Passage(key=1, title="d", text="x")]
        ),
    )
    assert rows.rows_one_statement(_turn(user), built=plain, scope=Scope())
    assert not rows.rows_one_statement(_turn(user), built=quoted, scope=Scope())
    some = Scope(kind="some", document_ids=[1])
    assert not rows.rows_one_statement(_turn(user), built=plain, scope=some)
    thread = Conversation.objects.create(user=user, title="t")
    assert not rows.rows_one_statement(_turn(user, thread), built=plain, scope=Scope())
