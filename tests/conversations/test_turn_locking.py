"""A turn holds no row lock while it builds its prompt and admits it
(conversations/services/turns/, gateway/generations/start.py), and a turn that loses
a race for the conversation gives its reservation back."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.db import connection, transaction

from chatsite.errors import Conflict
from conversations import services
from conversations.models import Conversation, Message
from conversations.services.turns import run
from inference import keys
from inference.connections import redis_sync
from tests.conftest import fake_heartbeat

pytestmark = pytest.mark.django_db(transaction=True)


def _reservations() -> list[str]:
    return list(keys.scan_iter_all(redis_sync(), keys.RESERVATION_KEY_PATTERN))


def _conversation(user: Any) -> Conversation:
    conversation = Conversation.objects.create(user=user, title="t")
    question = Message.objects.create(
        conversation=conversation, role=Message.Role.USER, content="hi"
    )
    Message.objects.create(
        conversation=conversation,
        role=Message.Role.ASSISTANT,
        content="hello",
        status=Message.Status.COMPLETE,
        parent=question,
    )
    return conversation


def test_the_conversation_row_is_not_locked_while_the_prompt_is_built(
    user, monkeypatch
):
    """Memory, retrieval and admission do I/O (embeddings, pgvector, Redis): another
    transaction must be able to lock the conversation meanwhile."""
    fake_heartbeat()
    conversation = _conversation(user)
    building, release = threading.Event(), threading.Event()
    real = run.prompt_build

    def slow_prompt(*args: Any, **kwargs: Any) -> Any:
        building.set()
        assert release.wait(10)
        return real(*args, **kwargs)

    monkeypatch.setattr(run, "prompt_build", slow_prompt)
    errors: list[BaseException] = []

    def send() -> None:
        try:
            services.turn_start(
                user=user, conversation_id=conversation.id, content="next"
            )
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            connection.close()

    thread = threading.Thread(target=send)
    thread.start()
    try:
        assert building.wait(10)
        with transaction.atomic():  # fails at once if the turn holds the row
            Conversation.objects.select_for_update(nowait=True).get(pk=conversation.pk)
    finally:
        release.set()
        thread.join(20)
    assert not errors
    assert conversation.messages.filter(status=Message.Status.STREAMING).count() == 1


def test_the_turn_that_loses_a_race_for_the_conversation_gives_its_tokens_back(
    user, monkeypatch
):
    """Two sends to one conversation both pass the early busy check and both reserve;
    the one that stores second is a Conflict and holds no reservation afterwards."""
    fake_heartbeat()
    conversation = _conversation(user)
    both_built = threading.Barrier(2, timeout=10)
    real = run.prompt_build

    def raced_prompt(*args: Any, **kwargs: Any) -> Any:
        built = real(*args, **kwargs)
        both_built.wait()
        return built

    monkeypatch.setattr(run, "prompt_build", raced_prompt)
    outcomes: list[Any] = []

    def send(text: str) -> None:
        try:
            outcomes.append(
                services.turn_start(
                    user=user, conversation_id=conversation.id, content=text
                )
            )
        except Conflict as exc:
            outcomes.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=send, args=(t,)) for t in ("one", "two")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(20)
    conflicts = [o for o in outcomes if isinstance(o, Conflict)]
    started = [o for o in outcomes if isinstance(o, services.Turn)]
    assert len(conflicts) == 1 and len(started) == 1
    assert conflicts[0].code == "conversation_busy"
    assert _reservations() == [
        keys.reservation_key(user.pk, started[0].assistant_message.job_id)
    ]
    assert conversation.messages.filter(role=Message.Role.USER).count() == 2
