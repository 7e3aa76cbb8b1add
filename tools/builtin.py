"""The built-in tools that need no upper layer: ``run_python`` (tools/sandbox.py),
``fetch_url`` (tools/fetch.py) and ``web_search`` (tools/search.py). Importing this
module registers them (tools/apps.py does at ready). ``web_search`` is offered only
while TOOLS_SEARCH_URL is set (:func:`builtin_offered`)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from django.conf import settings

from tools.capture import group_kill
from tools.fetch import FetchFailed, FetchRefused, url_fetch
from tools.registry import Tool, ToolContext, ToolResult, tool_register
from tools.sandbox import SandboxUnavailable, python_run
from tools.search import SearchFailed, web_search_run

__all__ = [
    "FETCH_URL",
    "RUN_PYTHON",
    "WEB_SEARCH",
    "builtin_offered",
    "builtin_register",
]

# Seconds a run may take beyond its own limit (sandbox start, the fetch's last read)
# before the registry's wall clock stops it.
MARGIN_S = 5.0


async def run_python(arguments: dict[str, Any], context: ToolContext) -> ToolResult:
    """Run ``arguments["code"]`` in the sandbox; cancelling kills the sandbox."""
    pids: list[int] = []
    work = asyncio.ensure_future(
        asyncio.to_thread(python_run, arguments["code"], started=pids.append)
    )
    try:
        done = await asyncio.shield(work)
    except asyncio.CancelledError:
        for pid in pids:
            group_kill(pid)
        with contextlib.suppress(BaseException):
            await work  # the thread ends once the killed sandbox's pipes close
        raise
    except SandboxUnavailable as exc:
        return ToolResult(text=f"Python is not available here: {exc}", error=True)
    except ValueError as exc:
        return ToolResult(text=str(exc), error=True)
    parts = []
    if done.stdout:
        parts.append(f"stdout:\n{done.stdout}")
    if done.stderr:
        parts.append(f"stderr:\n{done.stderr}")
    if done.timed_out:
        parts.append("The program was stopped at the sandbox's time limit.")
    parts.append(f"exit status: {done.exit_code}")
    return ToolResult(
        text="\n".join(parts),
        truncated="[output truncated:" in done.stdout + done.stderr,
        detail={
            "code": arguments["code"],
            "stdout": done.stdout,
            "stderr": done.stderr,
            "exit_code": done.exit_code,
            "timed_out": done.timed_out,
            "wall_ms": round(done.wall_ms, 1),
        },
        error=not done.ok,
    )


async def fetch_url(arguments: dict[str, Any], context: ToolContext) -> ToolResult:
    """Fetch ``arguments["url"]`` through the address policy as text."""
    try:
        page = await asyncio.to_thread(url_fetch, arguments["url"])
    except FetchRefused as exc:
        return ToolResult(text=f"The address was refused: {exc}", error=True)
    except FetchFailed as exc:
        return ToolResult(text=f"The page could not be fetched: {exc}", error=True)
    head = f"{page.url} (HTTP {page.status}, {page.content_type})"
    note = "\n[the page was cut at the fetch limit]" if page.truncated else ""
    return ToolResult(
        text=f"{head}\n\n{page.text}{note}",
        truncated=page.truncated,
        detail={
            "url": page.url,
            "status": page.status,
            "content_type": page.content_type,
            "chars": len(page.text),
        },
        error=page.status >= 400,
    )


async def web_search(arguments: dict[str, Any], context: ToolContext) -> ToolResult:
    """Search the configured SearxNG for ``arguments["query"]``."""
    try:
        hits = await web_search_run(arguments["query"])
    except SearchFailed as exc:
        return ToolResult(text=f"The web search failed: {exc}", error=True)
    if not hits:
        return ToolResult(text="No results.", detail={"results": []})
    lines = [
        f"{n}. {h['title']}\n   {h['url']}\n   {h['snippet']}"
        for n, h in enumerate(hits, 1)
    ]
    return ToolResult(text="\n".join(lines), detail={"results": hits})


def _fetch_label(a: dict[str, Any], r: ToolResult | None) -> str:
    return f"Read {a.get('url', 'a page')}"


def _search_label(a: dict[str, Any], r: ToolResult | None) -> str:
    return f"Searched the web for “{a.get('query', '')}”"


RUN_PYTHON = Tool(
    name="run_python",
    description=(
        "Run a Python 3 program in a sandbox without network access and return what "
        "it printed (stdout and stderr) and its exit status. Print every result you "
        "need. Only the standard library is available; files live in /scratch and "
        "last for this run only."
    ),
    parameters={
        "type": "object",
        "properties": {"code": {"type": "string", "description": "The program."}},
        "required": ["code"],
        "additionalProperties": False,
    },
    label=lambda a, r: "Ran Python",
    run=run_python,
    wall_s=lambda: float(settings.TOOLS_SANDBOX_WALL_S) + MARGIN_S,
)

FETCH_URL = Tool(
    name="fetch_url",
    description=(
        "Fetch a public web page (http or https) and return its text. Use it to read "
        "a page found by web_search or named by the user."
    ),
    parameters={
        "type": "object",
        "properties": {"url": {"type": "string", "description": "The page's URL."}},
        "required": ["url"],
        "additionalProperties": False,
    },
    label=_fetch_label,
    run=fetch_url,
    wall_s=lambda: float(settings.TOOLS_FETCH_TIMEOUT_S) + MARGIN_S,
)

WEB_SEARCH = Tool(
    name="web_search",
    description=(
        "Search the web and return the top results (title, URL, snippet). Fetch a "
        "result with fetch_url to read it."
    ),
    parameters={
        "type": "object",
        "properties": {
            "query": {"type": "string", "minLength": 1, "description": "Search terms."}
        },
        "required": ["query"],
        "additionalProperties": False,
    },
    label=_search_label,
    run=web_search,
    wall_s=lambda: float(settings.TOOLS_SEARCH_TIMEOUT_S) + MARGIN_S,
)


def builtin_offered(name: str) -> bool:
    """Whether the built-in tool ``name`` can be offered as configured now
    (``web_search`` needs TOOLS_SEARCH_URL; the others are always offered)."""
    if name == WEB_SEARCH.name:
        return bool(settings.TOOLS_SEARCH_URL)
    return True


def builtin_register() -> None:
    """Register the built-in tools of this module."""
    for tool in (RUN_PYTHON, FETCH_URL, WEB_SEARCH):
        tool_register(tool)
