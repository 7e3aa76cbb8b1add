"""A Python tool turn with the real embedded model (SmolLM2-135M on llama.cpp): the
user picks "Run Python" for the message, so the turn's first step has a named
``tool_choice`` and llama.cpp constrains it by a grammar built from the tool's schema.
The call is well-formed however small the model, the sandbox runs it (bubblewrap;
skipped without it), and a final text answer follows."""

import asyncio
import json
import shutil

import pytest
from django.urls import reverse

from conversations.models import Conversation, Message
from inference.engines.llamacpp import LlamaCppEngine
from tests.sse import asgi_sse, session_cookie

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is missing"),
]


def test_a_forced_run_python_turn_on_smollm2_calls_runs_and_answers(
    start_worker, auth_client, settings
):
    settings.CHAT_TOOLS_PROVIDER = (
        "conversations.services.turns.registry.registry_tools"
    )
    settings.CHAT_TOOL_MAX_STEPS = 1  # one round, then the model answers in text
    # room for the call: the small model writes long code strings (cut: no call)
    settings.CHAT_MAX_TOKENS = 256
    settings.CHAT_TEMPERATURE = 0.0  # the same call every run
    start_worker(LlamaCppEngine(n_ctx=4096))
    response = auth_client.post(
        reverse("message-send-new"),
        {"content": "What is 6 * 7? Compute it with Python.", "tool": "run_python"},
    )
    assert response.status_code == 201, response.content
    body = response.json()
    result = asyncio.run(
        asgi_sse(
            body["assistant_message"]["stream_url"],
            cookie=session_cookie(auth_client),
            timeout=300,
        )
    )
    assert result.completed
    calling = Message.objects.get(id=body["assistant_message"]["id"])
    assert calling.finish_reason == "tool_calls"
    assert [c["name"] for c in calling.tool_calls] == ["run_python"]
    arguments = json.loads(calling.tool_calls[0]["arguments"])
    assert isinstance(arguments, dict) and isinstance(arguments["code"], str)
    # the sandbox ran the model's code (whatever it is): its exit status is reported
    row = Message.objects.get(role="tool", conversation_id=body["conversation"]["id"])
    assert row.tool_name == "run_python" and "exit status:" in row.content
    final = result.last("done").data
    assert final["status"] == "complete" and final["finish_reason"] in {
        "stop",
        "length",
    }
    conversation = Conversation.objects.get(id=body["conversation"]["id"])
    answer = Message.objects.get(id=conversation.current_leaf_id)
    assert answer.role == "assistant" and answer.parent_id == row.id
    assert answer.content.strip() and not answer.tool_calls
