"""The composer's Tools menu and its per-message pick (conversations/views_tools.py,
templates/chat/_tool_picker.html, the ``tool`` field of a message): a picked tool
forces the turn's first generation to call it (a named ``tool_choice``), later steps
choose freely; a tool the user may not use is a 400 with nothing stored; the on/off
choice is kept per user."""

from __future__ import annotations

import asyncio

import pytest
from django.urls import reverse

from conversations.models import Conversation, Message
from conversations.services.turns.registry import tools_menu
from inference import params as inference_params
from tests.conversations import tool_loop_tools
from tests.conversations.tool_loop_tools import ToolEngine
from tests.sse import asgi_sse, session_cookie
from tools.models import ToolPreference, ToolSwitch

pytestmark = pytest.mark.django_db(transaction=True)

REGISTRY = "conversations.services.turns.registry.registry_tools"
ECHO = {"type": "function", "function": {"name": "echo"}}


@pytest.fixture(autouse=True)
def tools_on(settings, monkeypatch):
    settings.CHAT_TOOLS_PROVIDER = "tests.conversations.tool_loop_tools.provider"
    settings.SAFETY_INPUT_ENABLED = False
    for engine in ("llamacpp", "scripted"):
        monkeypatch.setitem(
            inference_params.ENGINE_PARAMS,
            engine,
            inference_params.ENGINE_PARAMS[engine] | inference_params.TOOLS,
        )
    tool_loop_tools.reset()


def post(client, content, **fields):
    return client.post(reverse("message-send-new"), {"content": content, **fields})


def relay(client, body):
    return asyncio.run(
        asgi_sse(body["assistant_message"]["stream_url"], cookie=session_cookie(client))
    )


def test_a_picked_tool_is_the_first_steps_named_choice_and_later_steps_are_auto(
    start_worker, auth_client
):
    engine = ToolEngine(text="Echoed it.")
    start_worker(engine)
    response = post(auth_client, "Say hi back.", tool="echo")
    assert response.status_code == 201, response.content
    result = relay(auth_client, response.json())
    assert result.last("done").data["finish_reason"] == "stop"
    assert engine.jobs[0].params["tool_choice"] == ECHO
    assert engine.jobs[1].params["tool_choice"] == "auto"
    assert [t["function"]["name"] for t in engine.jobs[0].params["tools"]] == [
        "echo",
        "wait",
    ]


def test_without_a_pick_the_turn_is_auto(start_worker, auth_client):
    engine = ToolEngine(text="Fine.")
    start_worker(engine)
    response = post(auth_client, "Hello.", tool="")
    relay(auth_client, response.json())
    assert engine.jobs[0].params["tool_choice"] == "auto"


def test_with_auto_offers_off_only_a_pick_and_its_chain_get_tools(
    start_worker, auth_client, settings
):
    # make run's setting (chatsite/settings/dev.py): a model that does not choose
    # tools by itself is not made to prefill their definitions on every turn
    settings.CHAT_TOOLS_AUTO = False
    engine = ToolEngine(text="Fine.")
    start_worker(engine)
    plain = post(auth_client, "Hello.", tool="")
    relay(auth_client, plain.json())
    assert "tools" not in engine.jobs[0].params
    assert "tool_choice" not in engine.jobs[0].params
    picked = post(auth_client, "Say hi back.", tool="echo")
    assert picked.status_code == 201, picked.content
    result = relay(auth_client, picked.json())
    assert result.last("done").data["finish_reason"] == "stop"
    assert engine.jobs[1].params["tool_choice"] == ECHO
    assert engine.jobs[2].params["tool_choice"] == "auto"  # the chain's next step
    assert engine.jobs[2].params["tools"]


@pytest.mark.parametrize("tool", ["nonexistent", "x" * 500])
def test_a_tool_not_offered_is_a_400_and_nothing_is_stored(
    start_worker, auth_client, tool
):
    engine = ToolEngine()
    start_worker(engine)
    response = post(auth_client, "Use it.", tool=tool)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "tool_unavailable"
    assert "not available" in error["message"] and len(error["message"]) < 400
    assert not Conversation.objects.exists() and not Message.objects.exists()
    assert engine.jobs == []


def test_without_a_tools_provider_a_pick_is_a_400(auth_client, settings):
    settings.CHAT_TOOLS_PROVIDER = ""
    response = post(auth_client, "Use it.", tool="echo")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "tool_unavailable"


def test_a_tool_turned_off_by_the_user_or_by_staff_cannot_be_picked(
    auth_client, user, settings
):
    settings.CHAT_TOOLS_PROVIDER = REGISTRY
    ToolPreference.objects.create(user=user, disabled=["run_python"])
    response = post(auth_client, "Run it.", tool="run_python")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "tool_unavailable"
    ToolPreference.objects.all().delete()
    ToolSwitch.objects.create(tool="run_python", enabled=False)
    response = post(auth_client, "Run it.", tool="run_python")
    assert response.status_code == 400
    assert not Message.objects.exists()


def test_a_picked_tool_the_engine_cannot_call_is_a_400_not_a_plain_answer(
    start_worker, auth_client, monkeypatch
):
    monkeypatch.setitem(
        inference_params.ENGINE_PARAMS, "llamacpp", inference_params.COMMON
    )
    monkeypatch.setitem(
        inference_params.ENGINE_PARAMS, "scripted", inference_params.COMMON
    )
    start_worker(ToolEngine())
    response = post(auth_client, "Use it.", tool="echo")
    assert response.status_code == 400
    assert not Message.objects.exists()


def test_the_menu_lists_the_allowed_tools_with_the_users_choice(
    auth_client, user, settings
):
    settings.CHAT_TOOLS_PROVIDER = REGISTRY
    ToolSwitch.objects.create(tool="fetch_url", enabled=False)
    off = auth_client.post(
        reverse("tool-choice"), {"tool": "run_python", "enabled": "0"}
    )
    assert off.status_code == 200
    assert off.json() == {
        "tool": "run_python",
        "enabled": False,
        "disabled": ["run_python"],
    }
    menu = {m.name: m for m in tools_menu(user=user)}
    assert "fetch_url" not in menu  # staff switched it off
    assert menu["run_python"].enabled is False
    assert menu["run_python"].title == "Run Python"
    page = auth_client.get(reverse("chat-home")).content.decode()
    assert 'id="tool-picker"' in page
    assert 'value="run_python" data-title="Run Python" disabled' in page
    on = auth_client.post(
        reverse("tool-choice"), {"tool": "run_python", "enabled": "1"}
    )
    assert on.json()["disabled"] == []
    assert tools_menu(user=user)[0].enabled is True


def test_the_choice_is_the_users_own(auth_client, user, other_user, settings):
    settings.CHAT_TOOLS_PROVIDER = REGISTRY
    auth_client.post(reverse("tool-choice"), {"tool": "run_python", "enabled": "0"})
    assert {m.name: m.enabled for m in tools_menu(user=other_user)}["run_python"]


@pytest.mark.parametrize(
    "fields",
    [{"tool": "run_python"}, {"enabled": "1"}, {"tool": "x", "enabled": "maybe"}],
)
def test_a_bad_choice_is_a_400(auth_client, fields):
    response = auth_client.post(reverse("tool-choice"), fields)
    assert response.status_code == 400
    assert response.json()["error"]["message"]
    assert not ToolPreference.objects.exists()


def test_the_menu_is_absent_without_tools(auth_client, settings):
    settings.CHAT_TOOLS_PROVIDER = ""
    page = auth_client.get(reverse("chat-home")).content.decode()
    assert 'id="tool-picker"' not in page


def test_tool_titles():
    from conversations.services.turns.registry import tool_title

    assert tool_title("run_python") == "Run Python"
    assert tool_title("calc__add") == "add (calc)"
    assert tool_title("plain") == "plain"
