"""OpenAI tool calling's request fields: ``tools`` (function tools with JSON Schema
parameters), ``tool_choice`` and ``parallel_tool_calls``, validated and normalised
for the engine (:func:`tool_params_parse`); ``params_parse`` merges them in.
"""

from __future__ import annotations

import json
import re
from typing import Any

from conversations.openai.invalid import INVALID, invalid_input, unicode_check

SCHEMA_MAX_CHARS = 20_000  # a JSON Schema's JSON, characters (grammar build is bounded)
TOOLS_MAX = 128  # functions per request, OpenAI's limit
TOOLS_MAX_CHARS = 200_000  # all tools' JSON together, characters
TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
TOOL_CHOICES = ("none", "auto", "required")


def _tool(value: Any, i: int) -> dict[str, Any]:
    """Return ``tools[i]`` normalised (``{"type", "function": {...}}``)."""
    where = f"tools[{i}]"
    if not isinstance(value, dict) or value.get("type") != "function":
        raise invalid_input(
            f'`{where}` must be {{"type": "function", "function": {{...}}}}.',
            INVALID,
            param="tools",
        )
    if set(value) - {"type", "function"}:
        extra = sorted(set(value) - {"type", "function"})
        raise invalid_input(
            f"`{where}` has unknown fields {extra}.", INVALID, param="tools"
        )
    spec = value.get("function")
    if not isinstance(spec, dict):
        raise invalid_input(
            f"`{where}.function` must be an object.", INVALID, param="tools"
        )
    extra = sorted(set(spec) - {"name", "description", "parameters", "strict"})
    if extra:
        raise invalid_input(
            f"`{where}.function` has unknown fields {extra}.", INVALID, param="tools"
        )
    name = spec.get("name")
    if not isinstance(name, str) or not TOOL_NAME.fullmatch(name):
        raise invalid_input(
            f"`{where}.function.name` must be 1 to 64 letters, digits, `_` or `-`.",
            INVALID,
            param="tools",
        )
    function: dict[str, Any] = {"name": name}
    description = spec.get("description")
    if description is not None:
        if not isinstance(description, str):
            raise invalid_input(
                f"`{where}.function.description` must be a string.",
                INVALID,
                param="tools",
            )
        unicode_check(description, f"`{where}.function.description`", param="tools")
        function["description"] = description
    parameters = spec.get("parameters")
    if parameters is not None:
        if not isinstance(parameters, dict):
            raise invalid_input(
                f"`{where}.function.parameters` must be a JSON Schema object.",
                INVALID,
                param="tools",
            )
        if parameters.get("type", "object") != "object":
            raise invalid_input(
                f'`{where}.function.parameters` must have "type": "object".',
                INVALID,
                param="tools",
            )
        if len(json.dumps(parameters)) > SCHEMA_MAX_CHARS:
            raise invalid_input(
                f"`{where}.function.parameters` is over {SCHEMA_MAX_CHARS:,} "
                "characters of JSON.",
                INVALID,
                param="tools",
            )
        function["parameters"] = parameters
    strict = spec.get("strict")
    if strict is not None:
        if not isinstance(strict, bool):
            raise invalid_input(
                f"`{where}.function.strict` must be true or false.",
                INVALID,
                param="tools",
            )
        function["strict"] = strict
    return {"type": "function", "function": function}


def _tools(value: Any) -> list[dict[str, Any]]:
    """Return the validated ``tools`` (an empty list means none)."""
    if not isinstance(value, list) or len(value) > TOOLS_MAX:
        raise invalid_input(
            f"`tools` must be a list of at most {TOOLS_MAX} functions.",
            INVALID,
            param="tools",
        )
    tools = [_tool(item, i) for i, item in enumerate(value)]
    names = [t["function"]["name"] for t in tools]
    if len(set(names)) != len(names):
        raise invalid_input(
            "`tools` names a function twice; names must be unique.",
            INVALID,
            param="tools",
        )
    if len(json.dumps(tools)) > TOOLS_MAX_CHARS:
        raise invalid_input(
            f"`tools` is over {TOOLS_MAX_CHARS:,} characters of JSON.",
            INVALID,
            param="tools",
        )
    return tools


def _tool_choice(value: Any, tools: list[dict[str, Any]]) -> Any:
    """Return the validated ``tool_choice`` for ``tools`` (a mode or a named call)."""
    if not tools:
        raise invalid_input(
            "`tool_choice` is only allowed when `tools` are given.",
            INVALID,
            param="tool_choice",
        )
    if isinstance(value, str):
        if value not in TOOL_CHOICES:
            raise invalid_input(
                '`tool_choice` must be "none", "auto", "required" or '
                '{"type": "function", "function": {"name": ...}}.',
                INVALID,
                param="tool_choice",
            )
        return value
    spec = value.get("function") if isinstance(value, dict) else None
    name = spec.get("name") if isinstance(spec, dict) else None
    if (
        not isinstance(value, dict)
        or value.get("type") != "function"
        or not isinstance(name, str)
    ):
        raise invalid_input(
            '`tool_choice` must be "none", "auto", "required" or '
            '{"type": "function", "function": {"name": ...}}.',
            INVALID,
            param="tool_choice",
        )
    if name not in {t["function"]["name"] for t in tools}:
        raise invalid_input(
            f"`tool_choice` names the function {name!r}, which is not in `tools`.",
            INVALID,
            param="tool_choice",
        )
    return {"type": "function", "function": {"name": name}}


def tool_params_parse(body: dict[str, Any]) -> dict[str, Any]:
    """Return the tool-calling parameters of ``body`` (absent, null and an empty
    ``tools`` list are left out)."""
    params: dict[str, Any] = {}
    tools = _tools(body["tools"]) if body.get("tools") is not None else []
    if tools:
        params["tools"] = tools
    if body.get("tool_choice") is not None:
        params["tool_choice"] = _tool_choice(body["tool_choice"], tools)
    parallel = body.get("parallel_tool_calls")
    if parallel is not None:
        if not isinstance(parallel, bool):
            raise invalid_input(
                "`parallel_tool_calls` must be true or false.",
                INVALID,
                param="parallel_tool_calls",
            )
        if not tools:
            raise invalid_input(
                "`parallel_tool_calls` is only allowed when `tools` are given.",
                INVALID,
                param="parallel_tool_calls",
            )
        params["parallel_tool_calls"] = parallel
    return params
