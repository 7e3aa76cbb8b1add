"""The tool loop with the registry's real tools (conversations/services/turns/
registry.py): ``run_python`` in the bubblewrap sandbox (skipped where bubblewrap is
missing), the user's choice of tools honoured, and a stop that kills the sandbox."""

from __future__ import annotations

import asyncio
import json
import shutil
import threading

import pytest
from django.urls import reverse

from conversations.models import Message
from inference.engines.scripted import ScriptedEngine
from tests.sse import asgi_sse, session_cookie

pytestmark = pytest.mark.django_db(transaction=True)

needs_bwrap = pytest.mark.skipif(
    shutil.which("bwrap") is None, reason="bubblewrap is missing"
)
REGISTRY = "conversations.services.turns.registry.registry_tools"


def python_call(code: str) -> list[dict]:
    return [{"name": "run_python", "arguments": json.dumps({"code": code})}]


@pytest.fixture(autouse=True)
def registry_on(settings):
    settings.CHAT_TOOLS_PROVIDER = REGISTRY
    settings.CHAT_TOOL_MAX_STEPS = 1  # one round, then the model answers


def turn(client, content):
    response = client.post(reverse("message-send-new"), {"content": content})
    assert response.status_code == 201, response.content
    body = response.json()
    result = asyncio.run(
        asgi_sse(body["assistant_message"]["stream_url"], cookie=session_cookie(client))
    )
    return body, result


@needs_bwrap
def test_a_python_call_runs_in_the_sandbox_and_the_model_reads_its_output(
    start_worker, auth_client
):
    start_worker(
        ScriptedEngine(text="It is 42.", tool_calls=python_call("print(6 * 7)"))
    )
    body, result = turn(auth_client, "What is 6 * 7?")
    assert result.last("done").data["finish_reason"] == "stop"
    row = Message.objects.get(role="tool", conversation_id=body["conversation"]["id"])
    assert row.tool_name == "run_python" and "42" in row.content
    assert row.tool_detail["error"] is False
    step = [e.data for e in result.events if e.event == "tool_step"][-1]
    assert "42" in step["html"]


class RecordingEngine(ScriptedEngine):
    """The scripted engine, keeping every job it receives."""

    def __init__(self, **options):
        super().__init__(**options)
        self.jobs = []

    async def generate(self, job):
        self.jobs.append(job)
        async for item in super().generate(job):
            yield item


def test_a_tool_the_user_turned_off_is_not_offered(start_worker, auth_client, user):
    from tools import services as tool_services

    engine = RecordingEngine(text="Plain.")
    start_worker(engine)
    turn(auth_client, "Hello.")
    offered = [t["function"]["name"] for t in engine.jobs[0].params.get("tools", [])]
    assert "run_python" in offered
    tool_services.tool_choice_set(user_id=user.pk, disabled=["run_python"])
    turn(auth_client, "Hello again.")
    offered = [t["function"]["name"] for t in engine.jobs[1].params.get("tools", [])]
    assert "run_python" not in offered


@needs_bwrap
def test_stop_during_a_python_run_kills_the_sandbox(start_worker, auth_client, user):
    from conversations import services

    start_worker(
        ScriptedEngine(text="never", tool_calls=python_call("while True:\n    pass"))
    )
    response = auth_client.post(reverse("message-send-new"), {"content": "Spin."})
    body = response.json()
    conversation_id = body["conversation"]["id"]
    calling_id = body["assistant_message"]["id"]
    stopped = threading.Event()

    def stop_when_running():
        from django.db import connection

        from conversations.services.turns import tools

        while not stopped.is_set():
            state = tools.step_state(message_id=calling_id)
            if state and state.get("call") == 0:  # the sandbox is starting
                services.turn_stop(
                    user=user, conversation_id=conversation_id, message_id=calling_id
                )
                stopped.set()
            stopped.wait(0.01)
        connection.close()

    stopper = threading.Thread(target=stop_when_running, daemon=True)
    stopper.start()
    result = asyncio.run(
        asgi_sse(
            body["assistant_message"]["stream_url"], cookie=session_cookie(auth_client)
        )
    )
    stopped.set()
    stopper.join(10)
    assert result.last("step_end").data["state"] == "stopped"
    row = Message.objects.get(role="tool", conversation_id=conversation_id)
    assert "Stopped" in row.content
