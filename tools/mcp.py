"""Tools of MCP servers (streamable HTTP, the official ``mcp`` SDK's client).

Each enabled :class:`~tools.models.McpServer` is asked for its tools (``tools/list``)
at most every TOOLS_MCP_LIST_TTL_S seconds per process; a server that cannot be
reached within TOOLS_MCP_LIST_TIMEOUT_S, or answers with an error, offers no tools
until it is asked again TOOLS_MCP_RETRY_S seconds later, and :func:`mcp_tools` says
so in a note (the turn goes on without them). A listed tool becomes a
:class:`~tools.registry.Tool` named ``<server>__<tool>`` (characters outside
OpenAI's ``[a-zA-Z0-9_-]`` become ``_``; the name is cut at 64). A call opens its own
session (``tools/call``), limited to TOOLS_MCP_CALL_TIMEOUT_S; the content's text
blocks are the model's text, other blocks are named, ``is_error`` is an error result.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from mcp import Client

from tools.models import McpServer
from tools.registry import Tool, ToolContext, ToolResult

__all__ = ["McpListing", "mcp_cache_clear", "mcp_tools"]

log = logging.getLogger(__name__)

SEPARATOR = "__"
NOT_NAME = re.compile(r"[^a-zA-Z0-9_-]")


@dataclass(frozen=True)
class McpListing:
    """The MCP tools on offer now and, for each server that failed, a note for the
    user and the logs ("MCP server "x" is unavailable: …")."""

    tools: list[Tool]
    notes: list[str]


@dataclass(frozen=True)
class _Cached:
    key: tuple[str, str]
    expires: float
    tools: list[Tool]
    note: str


_CACHE: dict[int, _Cached] = {}


def mcp_cache_clear() -> None:
    """Forget every cached listing (tests; an admin change is seen by its key)."""
    _CACHE.clear()


def tool_name(server: str, name: str) -> str:
    """Return the registry name of the MCP tool ``name`` of ``server``."""
    return NOT_NAME.sub("_", f"{server}{SEPARATOR}{name}")[:64]


def text_of(content: list[Any]) -> str:
    """Return the text of an MCP result's content blocks (others are named)."""
    parts = []
    for block in content:
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(block.text)
        else:
            parts.append(f"[{kind or 'unknown'} content not shown]")
    return "\n".join(parts)


def mcp_tool(*, server: McpServer, listed: Any) -> Tool:
    """Return the registry tool for ``listed`` (an mcp Tool) of ``server``."""
    url, remote = server.url, listed.name
    label = f"Used {server.name}: {listed.title or remote}"

    async def run(arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        timeout = float(settings.TOOLS_MCP_CALL_TIMEOUT_S)
        async with Client(url, read_timeout_seconds=timeout) as client:
            result = await client.call_tool(remote, arguments)
        text = text_of(list(result.content))
        return ToolResult(
            text=text,
            detail={
                "server": server.name,
                "tool": remote,
                "structured": result.structured_content,
            },
            error=bool(result.is_error),
        )

    schema = dict(listed.input_schema or {"type": "object"})
    schema.setdefault("type", "object")
    return Tool(
        name=tool_name(server.name, remote),
        description=listed.description or listed.title or remote,
        parameters=schema,
        label=lambda a, r: label,
        run=run,
        wall_s=lambda: float(settings.TOOLS_MCP_CALL_TIMEOUT_S),
        source=f"mcp:{server.name}",
    )


async def server_list(server: McpServer) -> list[Tool]:
    """Ask ``server`` for its tools (all pages); raises what the client raises."""
    timeout = float(settings.TOOLS_MCP_LIST_TIMEOUT_S)
    tools: list[Tool] = []
    async with asyncio.timeout(timeout):
        async with Client(server.url, read_timeout_seconds=timeout) as client:
            cursor: str | None = None
            while True:
                page = await client.list_tools(cursor=cursor)
                tools.extend(mcp_tool(server=server, listed=t) for t in page.tools)
                cursor = page.next_cursor
                if not cursor:
                    return tools


async def server_tools(server: McpServer) -> tuple[list[Tool], str]:
    """Return ``server``'s tools and "" or, when it fails, no tools and a note;
    reuses a listing younger than TOOLS_MCP_LIST_TTL_S (a failure: TOOLS_MCP_RETRY_S)."""
    key = (server.url, server.updated_at.isoformat())
    now = time.monotonic()
    hit = _CACHE.get(server.pk)
    if hit is not None and hit.key == key and hit.expires > now:
        return hit.tools, hit.note
    try:
        tools, note = await server_list(server), ""
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # the server's failure costs its tools, not the turn
        log.warning("MCP server %s is unavailable", server.name, exc_info=True)
        reason = "no answer in time" if isinstance(exc, TimeoutError) else str(exc)
        tools = []
        note = (
            f'MCP server "{server.name}" is unavailable: {reason or type(exc).__name__}'
        )
    ttl = float(settings.TOOLS_MCP_RETRY_S if note else settings.TOOLS_MCP_LIST_TTL_S)
    _CACHE[server.pk] = _Cached(key=key, expires=now + ttl, tools=tools, note=note)
    return tools, note


async def mcp_tools() -> McpListing:
    """Return the tools of every enabled MCP server (listed concurrently), with a
    note for each server that failed."""
    servers = [s async for s in McpServer.objects.filter(enabled=True)]
    answers = await asyncio.gather(*(server_tools(s) for s in servers))
    tools = [t for listed, _ in answers for t in listed]
    notes = [note for _, note in answers if note]
    return McpListing(tools=tools, notes=notes)
