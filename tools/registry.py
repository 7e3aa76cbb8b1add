"""The tool registry: what a tool is, how one runs, what the engine is offered.

A :class:`Tool` names itself, describes itself to the model (``description`` and a
JSON Schema of its ``parameters``), labels a run for the UI and runs as a coroutine.
:func:`tool_run` is the one way a tool runs: it validates the arguments against the
schema (a bad call is an error result the model can read, never an exception), runs
the tool under its wall-clock limit (``Tool.wall_s``, s), cuts the text for the model
at ``TOOLS_OUTPUT_CHARS`` characters with a note, and turns a failure into an error
result. Cancelling the task that awaits :func:`tool_run` cancels the tool (the
sandbox is killed; see tools/builtin.py).

Built-in tools are registered at import of :mod:`tools.builtin`; tools that need an
upper layer (``search_documents``: memory/ retrieval) are registered by that layer's
app at ready (gateway/tooling.py) with :func:`tool_register`. MCP servers' tools are
not in this table: :mod:`tools.mcp` lists them per server (cached).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass, field
from typing import Any

import jsonschema

__all__ = [
    "Tool",
    "ToolContext",
    "ToolResult",
    "openai_tools",
    "registered_tools",
    "tool_register",
    "tool_run",
    "tool_unregister",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ToolContext:
    """Who a tool runs for: ``user_id``, the plan's name (``plan``, "" without one)
    and the conversation's document scope (``document_ids``: None for all the user's
    documents, an empty tuple for none, else those ids)."""

    user_id: int
    plan: str = ""
    document_ids: tuple[int, ...] | None = None


@dataclass(frozen=True)
class ToolResult:
    """A run's outcome. ``text`` is what the model reads (at most
    ``TOOLS_OUTPUT_CHARS`` characters plus the cut note); ``truncated`` says it was
    cut; ``detail`` is JSON-serialisable structure for the UI's block (e.g. the
    program's stdout, the search hits); ``error`` marks a failed run (``text`` then
    says why, in words for the model and the user)."""

    text: str
    truncated: bool = False
    detail: dict[str, Any] = field(default_factory=dict)
    error: bool = False


Runner = Callable[[dict[str, Any], ToolContext], Awaitable[ToolResult]]
Labeller = Callable[[dict[str, Any], ToolResult | None], str]


@dataclass(frozen=True)
class Tool:
    """A tool the model may call.

    ``name``: ``^[a-zA-Z0-9_-]{1,64}$`` (OpenAI's rule; MCP tools are
    ``<server>__<tool>``). ``parameters``: a JSON Schema object. ``label(arguments,
    result)``: the UI's one-line summary ("Ran Python"), ``result`` None while it runs.
    ``run(arguments, context)``: the work, given validated arguments. ``wall_s``: a
    callable returning the run's wall-clock limit in s, read at call time (settings).
    ``source``: "builtin" or "mcp:<server>".
    """

    name: str
    description: str
    parameters: dict[str, Any]
    label: Labeller
    run: Runner
    wall_s: Callable[[], float]
    source: str = "builtin"

    def openai(self) -> dict[str, Any]:
        """Return the tool as one entry of OpenAI's ``tools`` list."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }


_REGISTRY: dict[str, Tool] = {}


def tool_register(tool: Tool) -> None:
    """Add ``tool`` to the registry (replacing one of the same name)."""
    jsonschema.Draft202012Validator.check_schema(tool.parameters)
    _REGISTRY[tool.name] = tool


def tool_unregister(name: str) -> None:
    """Remove the tool ``name`` (absent: nothing)."""
    _REGISTRY.pop(name, None)


def registered_tools() -> list[Tool]:
    """Return the registered (non-MCP) tools, by name."""
    return [_REGISTRY[n] for n in sorted(_REGISTRY)]


def openai_tools(tools: Collection[Tool]) -> list[dict[str, Any]]:
    """Return OpenAI's ``tools`` request parameter for ``tools`` (Job.params)."""
    return [t.openai() for t in tools]


def output_chars() -> int:
    """Return the cap of a result's text for the model, characters
    (TOOLS_OUTPUT_CHARS)."""
    from django.conf import settings

    return int(settings.TOOLS_OUTPUT_CHARS)


def text_cap(text: str, *, limit: int) -> tuple[str, bool]:
    """Return ``text`` cut to ``limit`` characters with a note, and whether it was."""
    if len(text) <= limit:
        return text, False
    dropped = len(text) - limit
    return f"{text[:limit]}\n[output truncated: {dropped} more characters]", True


def arguments_error(tool: Tool, arguments: Any) -> str | None:
    """Return why ``arguments`` do not fit ``tool``'s schema, or None when they do.
    Raises :class:`jsonschema.exceptions.SchemaError` when the schema itself is not
    valid JSON Schema (an MCP server's)."""
    if not isinstance(arguments, dict):
        return "the arguments must be a JSON object"
    jsonschema.Draft202012Validator.check_schema(tool.parameters)
    validator = jsonschema.Draft202012Validator(tool.parameters)
    problem = jsonschema.exceptions.best_match(validator.iter_errors(arguments))
    if problem is None:
        return None
    where = "/".join(str(p) for p in problem.absolute_path) or "arguments"
    return f"{where}: {problem.message}"


def arguments_parse(raw: str | dict[str, Any]) -> dict[str, Any] | str:
    """Return the arguments of a call (OpenAI sends a JSON string; "" is ``{}``), or
    the reason they are not a JSON object."""
    if isinstance(raw, dict):
        return raw
    if not raw.strip():
        return {}
    try:
        parsed = json.loads(raw)
    except json.JSONDecodeError as exc:
        return f"the arguments are not valid JSON: {exc.msg} at character {exc.pos}"
    if not isinstance(parsed, dict):
        return "the arguments must be a JSON object"
    return parsed


async def tool_run(
    tool: Tool, *, arguments: str | dict[str, Any], context: ToolContext
) -> ToolResult:
    """Run ``tool`` with ``arguments`` (the call's JSON string, or a dict) for
    ``context`` and return its result; never raises except CancelledError.

    Bad arguments (not JSON, not an object, not fitting the schema) give an error
    result naming the problem, without running the tool. The run is limited to
    ``tool.wall_s()`` seconds (then an error result saying so); an exception from the
    tool is an error result with its message. The text is cut at TOOLS_OUTPUT_CHARS
    characters (``truncated`` set). Cancelling the caller cancels the run.
    """
    parsed = arguments_parse(arguments)
    if isinstance(parsed, str):
        return ToolResult(text=f"{tool.name}: {parsed}", error=True)
    try:
        problem = arguments_error(tool, parsed)
    except jsonschema.exceptions.SchemaError as exc:  # an MCP server's broken schema
        return ToolResult(
            text=f"{tool.name} cannot be called: its parameter schema is invalid "
            f"({exc.message})",
            error=True,
        )
    if problem is not None:
        return ToolResult(text=f"{tool.name}: invalid arguments: {problem}", error=True)
    wall_s = tool.wall_s()
    try:
        async with asyncio.timeout(wall_s):
            result = await tool.run(parsed, context)
    except TimeoutError:
        return ToolResult(
            text=f"{tool.name} did not finish within {wall_s:g} s and was stopped",
            error=True,
        )
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # a tool's failure is the model's to read, not a crash
        log.warning("tool %s failed", tool.name, exc_info=True)
        return ToolResult(text=f"{tool.name} failed: {exc}", error=True)
    text, cut = text_cap(result.text, limit=output_chars())
    if not cut:
        return result
    return ToolResult(
        text=text, truncated=True, detail=result.detail, error=result.error
    )
