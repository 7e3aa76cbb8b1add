"""Retry on the fallback pool (gateway/fallback.py) through the real chat turn, Redis,
workers of two pools and the SSE relay."""

from __future__ import annotations

import asyncio
import time

import pytest
from django.urls import reverse

from conversations import services as chat
from conversations.models import Message
from gateway.models import UsageRecord
from inference.engines.scripted import ScriptedEngine
from tests.conftest import make_user
from tests.gateway import factories
from tests.sse import asgi_sse, session_cookie

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def two_pools(start_worker):
    small = factories.pool("small", model="small-1")
    big = factories.pool("big", model="big-1", fallback=small)
    start_worker(ScriptedEngine(model="big-1", fail_after=0), pool="big")
    start_worker(
        ScriptedEngine(model="small-1", text="Answer from small"), pool="small"
    )
    user = make_user("fallbacker")
    factories.subscribe(user, factories.plan("pro", pools=[small, big]))
    return user


def _finalize(job_id: str, timeout: float = 30.0) -> Message:
    deadline = time.time() + timeout
    while time.time() < deadline:
        message = chat.message_finalize(message_id=job_id)
        if message is not None:
            return message
        time.sleep(0.02)
    raise AssertionError("the answer did not finish")


def test_failure_before_the_first_token_is_answered_by_the_fallback_pool(
    two_pools, client
):
    client.force_login(two_pools)
    turn = chat.turn_start(user=two_pools, content="hi", model="big-1")
    assert turn.assistant_message.pool == "big"
    url = reverse(
        "message-stream", args=[turn.conversation.id, turn.assistant_message.id]
    )
    result = asyncio.run(asgi_sse(url, cookie=session_cookie(client), timeout=30))
    assert result.completed and result.last("error") is None
    assert result.text == "Answer from small"
    done = result.last("done")
    assert done.data["status"] == "complete" and done.data["model"] == "small-1"
    answer = Message.objects.get(id=turn.assistant_message.id)
    assert (answer.status, answer.model, answer.pool) == (
        "complete",
        "small-1",
        "small",
    )
    assert answer.content == "Answer from small"
    assert Message.objects.filter(role=Message.Role.ASSISTANT).count() == 1
    record = UsageRecord.objects.get()
    assert (record.model, record.pool, record.completion_tokens) == (
        "small-1",
        "small",
        3,
    )


def test_the_reaper_path_retries_too_and_stores_once(two_pools):
    turn = chat.turn_start(user=two_pools, content="hi", model="big")
    answer = _finalize(turn.assistant_message.job_id)
    assert (answer.status, answer.model) == ("complete", "small-1")
    assert chat.message_finalize(message_id=answer.id) is None
    assert UsageRecord.objects.count() == 1


def test_a_failure_after_tokens_were_sent_is_an_error_not_a_retry(start_worker):
    small = factories.pool("small", model="small-1")
    big = factories.pool("big", model="big-1", fallback=small)
    start_worker(
        ScriptedEngine(model="big-1", text="one two three", fail_after=2), pool="big"
    )
    start_worker(ScriptedEngine(model="small-1", text="never"), pool="small")
    user = make_user("partial")
    factories.subscribe(user, factories.plan("pro", pools=[small, big]))
    turn = chat.turn_start(user=user, content="hi", model="big")
    answer = _finalize(turn.assistant_message.job_id)
    assert answer.status == Message.Status.ERROR
    assert (answer.content, answer.pool) == ("one two", "big")
    assert UsageRecord.objects.get().status == "error"


def test_without_a_fallback_the_error_is_stored(start_worker):
    big = factories.pool("big", model="big-1")
    start_worker(ScriptedEngine(model="big-1", fail_after=0), pool="big")
    user = make_user("alone")
    factories.subscribe(user, factories.plan("pro", pools=[big]))
    turn = chat.turn_start(user=user, content="hi")
    answer = _finalize(turn.assistant_message.job_id)
    assert answer.status == Message.Status.ERROR and answer.pool == "big"
