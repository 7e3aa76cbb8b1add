"""tools/mcp.py and tools/selectors.py: an MCP server registered by staff offers its
tools as ``<server>__<tool>``; a call goes through the official SDK's client over
streamable HTTP to a server on loopback; a server that is down costs its tools with a
note, never the turn. Staff switches and the user's choice narrow what is offered."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest
import uvicorn
from asgiref.sync import sync_to_async
from mcp.server.mcpserver import MCPServer

from tools.mcp import mcp_cache_clear
from tools.models import McpServer, ToolSwitch
from tools.registry import ToolContext, tool_run
from tools.selectors import tool_menu, tools_available
from tools.services import tool_choice_set

pytestmark = pytest.mark.django_db(transaction=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def mcp_url() -> Iterator[str]:
    """A FastMCP-style server (mcp 2: MCPServer) with an ``add`` tool, on loopback."""
    app = MCPServer("calc")

    @app.tool(description="Add two integers.")
    def add(a: int, b: int) -> str:
        return str(a + b)

    @app.tool(description="Always fails.")
    def broken() -> str:
        raise ValueError("no such thing")

    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(
            app.streamable_http_app(),
            host="127.0.0.1",
            port=port,
            log_level="warning",
            lifespan="on",
        )
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline, "the MCP server did not start"
        time.sleep(0.02)
    mcp_cache_clear()
    try:
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        server.should_exit = True
        thread.join(10)
        mcp_cache_clear()


async def test_a_registered_servers_tools_are_listed_and_called(mcp_url, user):
    await McpServer.objects.acreate(name="calc", url=mcp_url)
    offer = await tools_available(user_id=user.id, plan="")
    assert offer.notes == []
    add = offer.get("calc__add")
    assert add is not None
    assert add.source == "mcp:calc"
    assert add.parameters["required"] == ["a", "b"]
    assert add.openai()["function"]["description"] == "Add two integers."
    context = ToolContext(user_id=user.id)
    result = await tool_run(add, arguments='{"a": 2, "b": 40}', context=context)
    assert (result.text, result.error) == ("42", False)
    bad = await tool_run(add, arguments='{"a": "two"}', context=context)
    assert bad.error and "invalid arguments" in bad.text
    broken = offer.get("calc__broken")
    assert broken is not None
    failed = await tool_run(broken, arguments="{}", context=context)
    assert failed.error
    assert "Error executing tool broken" in failed.text


async def test_a_server_that_is_down_offers_no_tools_and_says_so(user, settings):
    settings.TOOLS_MCP_LIST_TIMEOUT_S = 2.0
    mcp_cache_clear()
    await McpServer.objects.acreate(
        name="gone", url=f"http://127.0.0.1:{free_port()}/mcp"
    )
    offer = await tools_available(user_id=user.id, plan="")
    assert not [t for t in offer.tools if t.source.startswith("mcp:")]
    assert len(offer.notes) == 1
    assert offer.notes[0].startswith('MCP server "gone" is unavailable')
    assert offer.get("run_python") is not None  # the rest is still offered


async def test_a_disabled_server_is_not_asked(mcp_url, user):
    await McpServer.objects.acreate(name="calc", url=mcp_url, enabled=False)
    offer = await tools_available(user_id=user.id, plan="")
    assert offer.get("calc__add") is None
    assert offer.notes == []


async def test_staff_switch_a_tool_off_for_everyone_or_for_a_plan(user, settings):
    settings.TOOLS_SEARCH_URL = "http://127.0.0.1:1"
    offered = {
        t.name for t in (await tools_available(user_id=user.id, plan="free")).tools
    }
    assert {"run_python", "fetch_url", "web_search", "search_documents"} <= offered
    await ToolSwitch.objects.acreate(tool="run_python", enabled=False)
    await ToolSwitch.objects.acreate(tool="web_search", off_for_plans="free\nstudent\n")
    free = {t.name for t in (await tools_available(user_id=user.id, plan="free")).tools}
    pro = {t.name for t in (await tools_available(user_id=user.id, plan="pro")).tools}
    assert "run_python" not in free | pro
    assert "web_search" not in free
    assert "web_search" in pro


async def test_web_search_is_not_offered_without_a_backend(user, settings):
    settings.TOOLS_SEARCH_URL = ""
    offer = await tools_available(user_id=user.id, plan="")
    assert offer.get("web_search") is None


async def test_a_users_choice_turns_tools_off_for_them_only(user, django_user_model):
    other = await django_user_model.objects.acreate(username="bob")
    stored = await sync_to_async(tool_choice_set)(
        user_id=user.id, disabled=["fetch_url", "run_python", "fetch_url"]
    )
    assert stored == ["fetch_url", "run_python"]
    mine = {t.name for t in (await tools_available(user_id=user.id, plan="")).tools}
    theirs = {t.name for t in (await tools_available(user_id=other.id, plan="")).tools}
    assert "run_python" not in mine and "fetch_url" not in mine
    assert {"run_python", "fetch_url"} <= theirs
    menu = {t.name: on for t, on in await tool_menu(user_id=user.id, plan="")}
    assert menu["run_python"] is False
    assert menu["search_documents"] is True
    await sync_to_async(tool_choice_set)(user_id=user.id, disabled=[])
    again = {t.name for t in (await tools_available(user_id=user.id, plan="")).tools}
    assert "run_python" in again


def test_staff_register_an_mcp_server_and_switch_a_tool_in_the_admin(admin_client):
    response = admin_client.post(
        "/admin/tools/mcpserver/add/",
        {"name": "calc", "url": "http://10.0.0.5:8000/mcp", "enabled": "on"},
    )
    assert response.status_code == 302, response.content[:2000]
    assert McpServer.objects.get(name="calc").url == "http://10.0.0.5:8000/mcp"
    bad = admin_client.post(
        "/admin/tools/mcpserver/add/",
        {"name": "has space", "url": "http://10.0.0.5:8000/mcp", "enabled": "on"},
    )
    assert bad.status_code == 200  # the form again, with the name's error
    assert not McpServer.objects.filter(name="has space").exists()
    response = admin_client.post(
        "/admin/tools/toolswitch/add/",
        {"tool": "run_python", "off_for_plans": "free\r\nstudent"},
    )
    assert response.status_code == 302
    switch = ToolSwitch.objects.get(tool="run_python")
    assert (switch.enabled, switch.plans_off()) == (False, {"free", "student"})
