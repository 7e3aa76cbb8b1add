"""The whole turn with the real SmolLM2 model: worker (llama.cpp) -> Redis -> ASGI SSE -> DB."""

import asyncio

import pytest
from django.urls import reverse

from conversations.models import Message
from inference.engines.llamacpp import LlamaCppEngine
from tests.sse import asgi_sse, session_cookie

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_full_turn_with_the_real_smollm2_model(start_worker, auth_client):
    start_worker(LlamaCppEngine(n_ctx=2048))
    response = auth_client.post(
        reverse("message-send-new"), {"content": "Name three colours."}
    )
    assert response.status_code == 201
    body = response.json()
    result = asyncio.run(
        asgi_sse(
            body["assistant_message"]["stream_url"],
            cookie=session_cookie(auth_client),
            timeout=120,
        )
    )
    tokens = [e for e in result.events if e.event == "token"]
    assert len(tokens) > 1  # it streamed, not one blob
    assert result.last("meta").data["model"] == "SmolLM2-135M-Instruct.Q4_1"
    done = result.last("done")
    assert done.data["status"] == "complete"
    answer = Message.objects.get(id=body["assistant_message"]["id"])
    assert answer.content.strip() and answer.content == result.text
    assert answer.token_count > 0 and answer.prompt_tokens > 0
    assert answer.model == "SmolLM2-135M-Instruct.Q4_1"
    assert answer.ttft_ms is not None and answer.latency_ms >= answer.ttft_ms
