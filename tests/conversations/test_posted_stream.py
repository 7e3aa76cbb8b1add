"""The message POST answered with the answer's stream (Accept: text/event-stream;
conversations.sse.turn_stream_response): the turn's JSON comes as the first frame,
then the frames the stream URL would send, through the real ASGI application."""

from __future__ import annotations

import json
from urllib.parse import urlencode

import pytest
from asgiref.sync import sync_to_async
from django.test import Client
from django.urls import reverse

from conversations.events import sse_validate
from conversations.models import Message
from inference.engines.scripted import ScriptedEngine
from tests.sse import asgi_sse, session_cookie

pytestmark = pytest.mark.django_db(transaction=True)

CSRF = "k" * 32  # an unmasked CSRF secret: cookie and header agree


async def _post(user, content: str, accept: str):
    client = Client()
    await sync_to_async(client.force_login)(user)
    return await asgi_sse(
        reverse("message-send-new"),
        method="POST",
        body=urlencode({"content": content}).encode(),
        cookie=f"{session_cookie(client)}; csrftoken={CSRF}",
        headers={
            "accept": accept,
            "x-csrftoken": CSRF,
            "content-type": "application/x-www-form-urlencoded",
        },
    )


async def test_the_post_streams_the_turn_then_the_answer_to_its_end(user, start_worker):
    start_worker(ScriptedEngine(text="Hello **there**, friend.", delay_ms=2))
    result = await _post(user, "hi", "text/event-stream, application/json")

    assert result.status == 201
    assert result.headers["content-type"].startswith("text/event-stream")
    assert result.headers["cache-control"] == "no-cache"
    kinds = [e.event for e in result.events]
    assert kinds[0] == "turn" and "token" in kinds and kinds[-1] == "done"
    for event in result.events:
        sse_validate(event.event, event.data)
    answer = await Message.objects.aget(role=Message.Role.ASSISTANT)
    turn = result.events[0].data
    assert turn["assistant_message"]["id"] == str(answer.id)
    assert turn["assistant_message"]["stream_url"] == reverse(
        "message-stream", args=[answer.conversation_id, answer.id]
    )
    assert turn["conversation"]["created"] is True
    assert result.text == answer.content and answer.status == "complete"
    assert result.last("done").data["message_id"] == str(answer.id)


async def test_a_client_that_does_not_name_event_stream_gets_the_turn_as_json(
    user, start_worker
):
    start_worker(ScriptedEngine(text="Fine.", delay_ms=0))
    result = await _post(user, "hi", "*/*")
    assert result.status == 201
    assert result.headers["content-type"] == "application/json"
    assert json.loads(result.body)["assistant_message"]["stream_url"]


async def test_a_refused_message_is_a_json_error_even_when_a_stream_was_asked_for(
    user,
):
    result = await _post(user, "   ", "text/event-stream, application/json")
    assert result.status == 400
    assert result.headers["content-type"] == "application/json"
    assert json.loads(result.body)["error"]["code"]
    assert not await Message.objects.aexists()


def _pooled_in_use() -> int:
    from django.db import connection

    stats = connection.pool.get_stats()
    return stats["pool_size"] - stats["pool_available"]


async def test_the_post_holds_no_pooled_connection_while_the_answer_streams(
    user, start_worker
):
    """Django gives a request's connection back when the response ends: a streamed
    POST would keep it for the whole answer, and a burst of them the whole pool."""
    start_worker(ScriptedEngine(text="slow words " * 20, delay_ms=30))
    await _post(user, "warm the pool", "application/json")  # opens the pool
    before = _pooled_in_use()
    seen: list[int] = []

    def probe(result) -> bool:
        if result.last("token") is None:
            return False
        seen.append(_pooled_in_use())
        return True  # leave: one look mid-answer is enough

    client = Client()
    await sync_to_async(client.force_login)(user)
    await asgi_sse(
        reverse("message-send-new"),
        method="POST",
        body=urlencode({"content": "stream it"}).encode(),
        cookie=f"{session_cookie(client)}; csrftoken={CSRF}",
        headers={
            "accept": "text/event-stream",
            "x-csrftoken": CSRF,
            "content-type": "application/x-www-form-urlencoded",
        },
        stop_when=probe,
    )
    assert seen and seen[0] <= before
