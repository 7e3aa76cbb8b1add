"""Parse and validate ``/v1/chat/completions`` bodies, and the field checks every API
body shares (pure: no I/O; ``/v1/embeddings`` bodies: :mod:`.embedding_requests`).

Errors are :class:`~chatsite.errors.InvalidInput` (400) or
:class:`~chatsite.errors.PayloadTooLarge` (413) with a message naming the field; the
field's name is also on the exception as ``param`` (OpenAI's ``error.param``; None
when the error is about the body as a whole).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from chatsite.errors import DomainError, InvalidInput, PayloadTooLarge
from chatsite.jsonbody import json_loads_bounded

# OpenAI roles accepted, and the role the engine sees
ROLES = {
    "system": "system",
    "developer": "system",
    "user": "user",
    "assistant": "assistant",
}


@dataclass
class CompletionRequest:
    """A validated ``/v1/chat/completions`` body.

    ``messages`` are engine-ready (``developer`` folded into ``system``, content parts
    joined); ``params`` the sampling parameters given (``max_tokens`` in tokens).
    ``cache`` is our extension (``extra_body={"cache": true}`` in the openai client):
    true, the answer may come from this user's answer caches even at a temperature
    above 0; false, the caches are neither read nor filled (also at temperature 0).
    """

    model: str
    messages: list[dict[str, str]]
    params: dict[str, Any] = field(default_factory=dict)
    stream: bool = False
    include_usage: bool = False
    cache: bool | None = None  # True: opted in at any temperature; False: opted out


def _with_param(exc: DomainError, param: str | None) -> DomainError:
    """Name the request field ``exc`` is about (OpenAI's ``error.param``)."""
    exc.param = param
    return exc


def invalid_input(
    message: str, code: str = "invalid_request", *, param: str | None = None
) -> DomainError:
    """Return an InvalidInput (400) about the request field ``param`` (None: the body)."""
    return _with_param(InvalidInput(message, code=code), param)


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


def unicode_check(text: str, where: str, *, param: str) -> None:
    """Raise InvalidInput if ``text`` holds an unpaired UTF-16 surrogate.

    JSON may escape one (``"\\ud800"``) and Python decodes it into a str that UTF-8
    cannot encode: the job (Redis), the cache key and the response would all fail on
    it (a 500).
    """
    if text.isascii():
        return
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise invalid_input(
            f"{where} contains an unpaired UTF-16 surrogate (\\ud800-\\udfff); send "
            "valid Unicode text.",
            "invalid_character",
            param=param,
        ) from exc


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


def _messages(raw: Any) -> list[dict[str, str]]:
    if not isinstance(raw, list) or not raw:
        raise invalid_input(
            "`messages` must be a non-empty list of messages.",
            "invalid_messages",
            param="messages",
        )
    messages: list[dict[str, str]] = []
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
                "user or assistant.",
                "invalid_role",
                param="messages",
            )
        text = _content_text(message.get("content"), i, role)
        messages.append({"role": ROLES[role], "content": text})
    if not any(m["role"] == "user" and m["content"].strip() for m in messages):
        raise invalid_input(
            "`messages` needs at least one non-empty user message.",
            "no_prompt",
            param="messages",
        )
    total = sum(len(m["content"]) for m in messages)
    if total > settings.API_MAX_PROMPT_CHARS:
        raise _with_param(
            PayloadTooLarge(
                f"The messages hold {total:,} characters; the limit is "
                f"{settings.API_MAX_PROMPT_CHARS:,}.",
                code="prompt_too_long",
            ),
            "messages",
        )
    return messages


def _number(body: dict[str, Any], name: str, lo: float, hi: float) -> float | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise invalid_input(
            f"`{name}` must be a number.", "invalid_parameter", param=name
        )
    if not lo <= value <= hi:
        raise invalid_input(
            f"`{name}` must be between {lo:g} and {hi:g}.",
            "invalid_parameter",
            param=name,
        )
    return float(value)


def _params(body: dict[str, Any]) -> dict[str, Any]:
    params: dict[str, Any] = {}
    for name in ("max_completion_tokens", "max_tokens"):
        value = body.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise invalid_input(
                f"`{name}` must be a positive integer.", "invalid_parameter", param=name
            )
        params.setdefault("max_tokens", value)
    temperature = _number(body, "temperature", 0, 2)
    if temperature is not None:
        params["temperature"] = temperature
    top_p = _number(body, "top_p", 0, 1)
    if top_p is not None:
        params["top_p"] = top_p
    stop = body.get("stop")
    if stop is not None:
        stops = [stop] if isinstance(stop, str) else stop
        if (
            not isinstance(stops, list)
            or len(stops) > 4
            or not all(isinstance(s, str) and s for s in stops)
        ):
            raise invalid_input(
                "`stop` must be a string or a list of up to 4 non-empty strings.",
                "invalid_parameter",
                param="stop",
            )
        for stop_text in stops:
            unicode_check(stop_text, "`stop`", param="stop")
        if stops:
            params["stop"] = stops
    if body.get("n") not in (None, 1):
        raise invalid_input(
            "Only `n` = 1 is supported.", "invalid_parameter", param="n"
        )
    return params


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
        params=_params(data),
        stream=stream,
        include_usage=include_usage,
        cache=cache,
    )
