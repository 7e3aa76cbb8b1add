"""Every SSE payload the chat sends the browser fits its schema (conversations/events.py)."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async
from django.test import Client
from django.urls import reverse

from conversations import services
from conversations.events import sse_validate
from inference.engines.scripted import ScriptedEngine
from tests.conftest import fake_heartbeat
from tests.sse import asgi_sse, session_cookie

pytestmark = pytest.mark.django_db(transaction=True)


async def _stream(user, content: str):
    client = Client()
    await sync_to_async(client.force_login)(user)
    turn = await sync_to_async(services.turn_start)(user=user, content=content)
    return await asgi_sse(
        reverse(
            "message-stream", args=[turn.conversation.id, turn.assistant_message.id]
        ),
        cookie=session_cookie(client),
    )


async def test_a_streamed_answer_sends_only_frames_that_fit_their_schemas(
    user, start_worker
):
    start_worker(ScriptedEngine(text="Hello **there**, friend.", delay_ms=2))
    result = await _stream(user, "hi")
    kinds = [e.event for e in result.events]
    assert kinds[0] == "meta" and "token" in kinds and kinds[-1] == "done"
    for event in result.events:
        sse_validate(event.event, event.data)


async def test_a_failed_answer_sends_an_error_frame_that_fits_its_schema(
    user, settings
):
    settings.INFERENCE_QUEUE_TIMEOUT_S = 0.0  # no worker takes it: a queue timeout
    fake_heartbeat()
    result = await _stream(user, "hi")
    error = result.events[-1]
    assert error.event == "error" and error.data["code"] == "generation_failed"
    sse_validate("error", error.data)


@pytest.mark.parametrize(
    ("event", "payload"),
    [
        ("token", {"t": 3}),
        ("token", {"t": "x", "extra": 1}),
        ("queue", {"position": -1}),
        ("queue", {"position": True}),
        ("queue", {}),
        ("done", {"message_id": "m"}),
        (
            "error",
            {
                "code": "x",
                "message": "y",
                "message_id": "m",
                "retryable": "no",
                "retry_after_s": None,
            },
        ),
        ("nope", {}),
    ],
)
def test_the_validator_rejects_payloads_that_do_not_fit(event, payload):
    with pytest.raises(ValueError):
        sse_validate(event, payload)
