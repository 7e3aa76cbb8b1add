"""Tools in a prompt for a model whose chat template has none (Hermes/Qwen style):
the tool list in the system message, calls written back as ``<tool_call>`` blocks
with their original arguments text, results as ``<tool_response>`` blocks; and which
tools a job's ``params`` offer or force. :mod:`inference.toolcalls` reads the calls
back out of the generated text.
"""

from __future__ import annotations

import json
from typing import Any

from inference.toolcalls import CLOSE, OPEN

TOOL_SYSTEM_PROMPT = (
    "You may call one or more functions to assist with the user query. You are "
    "provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
    "{tools}\n</tools>\n\nFor each function call, return a JSON object with the "
    "function name and arguments within <tool_call></tool_call> XML tags:\n"
    '<tool_call>\n{{"name": <function-name>, "arguments": <args-json-object>}}\n'
    "</tool_call>"
)


def offered_tools(params: dict[str, Any]) -> list[dict[str, Any]] | None:
    """Return the tools a job's ``params`` offer the model (None with none, or with
    ``tool_choice`` ``"none"``: then the model is not told about them)."""
    tools = params.get("tools") or None
    if tools and params.get("tool_choice") == "none":
        return None
    return tools


def forced_tool(params: dict[str, Any]) -> str | None:
    """Return the function name ``tool_choice`` names ({"type": "function",
    "function": {"name": ...}}), or None."""
    choice = params.get("tool_choice")
    if isinstance(choice, dict):
        name = (choice.get("function") or {}).get("name")
        return str(name) if name else None
    return None


def render_tool_call(call: dict[str, Any]) -> str:
    """Return an assistant message's OpenAI ``tool_calls`` entry as the model writes
    it: ``<tool_call>\\n{"name": ..., "arguments": ...}\\n</tool_call>`` (the
    arguments text inserted as it was generated)."""
    function = call.get("function") or {}
    arguments = function.get("arguments")
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments if arguments is not None else {})
    name = json.dumps(function.get("name", ""), ensure_ascii=False)
    return f'{OPEN}\n{{"name": {name}, "arguments": {arguments or "{}"}}}\n{CLOSE}'


def plain_messages(
    messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None
) -> list[dict[str, str]]:
    """Return ``messages`` in plain ``{role, content}`` form for a chat template that
    knows nothing of tools: the tools described in the system message (module doc),
    assistant ``tool_calls`` written as ``<tool_call>`` blocks after their text, and
    ``tool`` results as a user message of ``<tool_response>`` blocks (consecutive
    results merged, so user and assistant turns still alternate)."""
    out: list[dict[str, str]] = []
    if tools:
        listing = "\n".join(
            json.dumps(t, ensure_ascii=False) for t in tools if t.get("function")
        )
        prompt = TOOL_SYSTEM_PROMPT.format(tools=listing)
        if messages and messages[0].get("role") == "system":
            prompt = f"{messages[0].get('content') or ''}\n\n{prompt}".lstrip()
            messages = messages[1:]
        out.append({"role": "system", "content": prompt})
    for message in messages:
        role = str(message.get("role", "user"))
        content = message.get("content")
        text = content if isinstance(content, str) else _text_of(content)
        if role == "assistant" and message.get("tool_calls"):
            blocks = [render_tool_call(c) for c in message["tool_calls"]]
            text = "\n".join([text, *blocks] if text else blocks)
        if role == "tool":
            block = f"<tool_response>\n{text}\n</tool_response>"
            if out and out[-1].get("_tool"):
                out[-1]["content"] += "\n" + block
                continue
            out.append({"role": "user", "content": block, "_tool": "1"})
            continue
        out.append({"role": role, "content": text})
    for m in out:
        m.pop("_tool", None)
    return out


def _text_of(content: Any) -> str:
    """Return the text of a content value that is not a string (None, or a list of
    OpenAI content parts: their ``text`` joined)."""
    if not content:
        return ""
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content)
