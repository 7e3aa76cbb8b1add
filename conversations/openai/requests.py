"""Parse and validate ``/v1/chat/completions`` bodies (pure: no I/O; the generation
parameters: :mod:`.params`, which also holds the field checks every API body shares;
``/v1/embeddings`` bodies: :mod:`.embedding_requests`).

Errors are :class:`~chatsite.errors.InvalidInput` (400) or
:class:`~chatsite.errors.PayloadTooLarge` (413) with a message naming the field; the
field's name is also on the exception as ``param`` (OpenAI's ``error.param``; None
when the error is about the body as a whole).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from chatsite.errors import InvalidInput, PayloadTooLarge
from chatsite.jsonbody import json_loads_bounded
from conversations.openai.invalid import invalid_input, unicode_check, with_param
from conversations.openai.params import params_parse, user_parse

__all__ = [
    "CompletionRequest",
    "completion_request_parse",
    "invalid_input",
    "json_object",
    "unicode_check",
]

# OpenAI roles accepted, and the role the engine sees
ROLES = {
    "system": "system",
    "developer": "system",
    "user": "user",
    "assistant": "assistant",
    "tool": "tool",
}
TOOL_CALLS_MAX = 128  # calls on one assistant message


@dataclass
class CompletionRequest:
    """A validated ``/v1/chat/completions`` body.

    ``messages`` are engine-ready (``developer`` folded into ``system``, content parts
    joined; an assistant message's ``tool_calls`` kept in OpenAI's shape with its
    content ``""`` when null, a ``tool`` message as ``{"role", "tool_call_id",
    "content"}``); ``params`` the sampling parameters given (``max_tokens`` in tokens).
    ``cache`` is our extension (``extra_body={"cache": true}`` in the openai client):
    true, the answer may come from this user's answer caches even at a temperature
    above 0; false, the caches are neither read nor filled (also at temperature 0).
    """

    model: str
    messages: list[dict[str, Any]]
    params: dict[str, Any] = field(default_factory=dict)
    stream: bool = False
    include_usage: bool = False
    cache: bool | None = None  # True: opted in at any temperature; False: opted out
    user: str | None = None  # the caller's end-user id: accepted, not used


def json_object(body: bytes) -> dict[str, Any]:
    """Return the JSON object of a request body (UTF-8 bytes); raise InvalidInput
    (``invalid_json``) when it is not valid JSON or not an object."""
    try:
        data = json_loads_bounded(body or b"null", max_depth=settings.JSON_MAX_DEPTH)
    except InvalidInput as exc:
        raise invalid_input(exc.message, exc.code) from exc
    if not isinstance(data, dict):
        raise invalid_input("The request body must be a JSON object.", "invalid_json")
    return data


def _content_text(content: Any, index: int, role: str) -> str:
    if content is None and role == "assistant":
        return ""
    if isinstance(content, str):
        text = content
    elif isinstance(content, list):
        parts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text":
                raise invalid_input(
                    f"messages[{index}].content: only text parts are supported "
                    '({"type": "text", "text": "..."}).',
                    "unsupported_content",
                    param="messages",
                )
            if not isinstance(part.get("text"), str):
                raise invalid_input(
                    f"messages[{index}].content: a text part needs a string.",
                    param="messages",
                )
            parts.append(part["text"])
        text = "".join(parts)
    else:
        raise invalid_input(
            f"messages[{index}].content must be a string or a list of text parts.",
            "invalid_content",
            param="messages",
        )
    if "\x00" in text:
        raise invalid_input(
            f"messages[{index}].content contains a NUL character.",
            "invalid_character",
            param="messages",
        )
    unicode_check(text, f"messages[{index}].content", param="messages")
    return text


def _tool_calls(value: Any, index: int) -> list[dict[str, Any]]:
    """Return an assistant message's ``tool_calls`` (OpenAI's shape, validated)."""
    where = f"messages[{index}].tool_calls"
    if not isinstance(value, list) or not 0 < len(value) <= TOOL_CALLS_MAX:
        raise invalid_input(
            f"`{where}` must be a list of 1 to {TOOL_CALLS_MAX} tool calls.",
            "invalid_messages",
            param="messages",
        )
    calls = []
    for j, call in enumerate(value):
        spec = call.get("function") if isinstance(call, dict) else None
        if (
            not isinstance(call, dict)
            or call.get("type", "function") != "function"
            or not isinstance(call.get("id"), str)
            or not call["id"]
            or not isinstance(spec, dict)
            or not isinstance(spec.get("name"), str)
            or not spec["name"]
            or not isinstance(spec.get("arguments"), str)
        ):
            raise invalid_input(
                f'`{where}[{j}]` must be {{"id": str, "type": "function", '
                '"function": {"name": str, "arguments": str}}.',
                "invalid_messages",
                param="messages",
            )
        unicode_check(
            spec["arguments"], f"{where}[{j}].function.arguments", param="messages"
        )
        calls.append(
            {
                "id": call["id"],
                "type": "function",
                "function": {"name": spec["name"], "arguments": spec["arguments"]},
            }
        )
    return calls


def _message(message: dict[str, Any], i: int, call_ids: set[str]) -> dict[str, Any]:
    """Return message ``i`` engine-ready; ``call_ids`` holds the ids of the tool
    calls of earlier assistant messages (this one's are added)."""
    role = ROLES[message["role"]]
    text = _content_text(message.get("content"), i, role)
    if role == "assistant" and message.get("tool_calls") is not None:
        calls = _tool_calls(message["tool_calls"], i)
        ids = [c["id"] for c in calls]
        if len(set(ids)) != len(ids) or call_ids.intersection(ids):
            raise invalid_input(
                f"messages[{i}].tool_calls: each tool call's `id` must be unique in "
                "the conversation.",
                "invalid_messages",
                param="messages",
            )
        call_ids.update(ids)
        return {"role": role, "content": text, "tool_calls": calls}
    if role == "tool":
        call_id = message.get("tool_call_id")
        if not isinstance(call_id, str) or call_id not in call_ids:
            raise invalid_input(
                f"messages[{i}].tool_call_id must be the id of a tool call of an "
                "earlier assistant message.",
                "invalid_tool_call_id",
                param="messages",
            )
        return {"role": role, "tool_call_id": call_id, "content": text}
    return {"role": role, "content": text}


def _messages(raw: Any) -> list[dict[str, Any]]:
    if not isinstance(raw, list) or not raw:
        raise invalid_input(
            "`messages` must be a non-empty list of messages.",
            "invalid_messages",
            param="messages",
        )
    messages: list[dict[str, Any]] = []
    call_ids: set[str] = set()
    for i, message in enumerate(raw):
        if not isinstance(message, dict):
            raise invalid_input(
                f"messages[{i}] must be an object.",
                "invalid_messages",
                param="messages",
            )
        role = message.get("role")
        # a list or object is unhashable: `in ROLES` itself would raise (a 500)
        if not isinstance(role, str) or role not in ROLES:
            raise invalid_input(
                f"messages[{i}].role {role!r} is not supported: use system, developer, "
                "user, assistant or tool.",
                "invalid_role",
                param="messages",
            )
        messages.append(_message(message, i, call_ids))
    if not any(m["role"] == "user" and m["content"].strip() for m in messages):
        raise invalid_input(
            "`messages` needs at least one non-empty user message.",
            "no_prompt",
            param="messages",
        )
    total = sum(
        len(m["content"])
        + sum(len(c["function"]["arguments"]) for c in m.get("tool_calls", ()))
        for m in messages
    )
    if total > settings.API_MAX_PROMPT_CHARS:
        raise with_param(
            PayloadTooLarge(
                f"The messages hold {total:,} characters; the limit is "
                f"{settings.API_MAX_PROMPT_CHARS:,}.",
                code="prompt_too_long",
            ),
            "messages",
        )
    return messages


def completion_request_parse(body: bytes) -> CompletionRequest:
    """Validate a ``/v1/chat/completions`` JSON body (UTF-8 bytes).

    Raises InvalidInput (400) or PayloadTooLarge (413, over API_MAX_PROMPT_CHARS
    characters of message content), naming the field in the message and in ``param``.
    """
    data = json_object(body)
    model = data.get("model")
    if not isinstance(model, str) or not model.strip():
        raise invalid_input(
            "`model` is required (see GET /v1/models).", "missing_model", param="model"
        )
    stream = data.get("stream", False)
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise invalid_input(
            "`stream` must be true or false.", "invalid_parameter", param="stream"
        )
    options = data.get("stream_options")
    include_usage = False
    if options is not None:
        if not stream:
            raise invalid_input(
                "`stream_options` is only allowed when `stream` is true.",
                "invalid_parameter",
                param="stream_options",
            )
        if not isinstance(options, dict):
            raise invalid_input(
                "`stream_options` must be an object.",
                "invalid_parameter",
                param="stream_options",
            )
        include_usage = options.get("include_usage", False)
        if not isinstance(include_usage, bool):
            raise invalid_input(
                "`stream_options.include_usage` must be true or false.",
                "invalid_parameter",
                param="stream_options.include_usage",
            )
    cache = data.get("cache")
    if cache is not None and not isinstance(cache, bool):
        raise invalid_input(
            "`cache` must be true or false.", "invalid_parameter", param="cache"
        )
    return CompletionRequest(
        model=model.strip(),
        messages=_messages(data.get("messages")),
        params=params_parse(data),
        user=user_parse(data.get("user")),
        stream=stream,
        include_usage=include_usage,
        cache=cache,
    )
