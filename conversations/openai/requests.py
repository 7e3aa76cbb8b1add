"""Parse and validate ``/v1/chat/completions`` and ``/v1/embeddings`` bodies (pure: no
I/O).

Errors are :class:`~chatsite.errors.InvalidInput` (400) or
:class:`~chatsite.errors.PayloadTooLarge` (413) with a message naming the field; the
field's name is also on the exception as ``param`` (OpenAI's ``error.param``; None
when the error is about the body as a whole).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from chatsite.errors import DomainError, InvalidInput, PayloadTooLarge

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


def _bad(
    message: str, code: str = "invalid_request", *, param: str | None = None
) -> DomainError:
    return _with_param(InvalidInput(message, code=code), param)


def _unicode_check(text: str, where: str, *, param: str) -> None:
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
        raise _bad(
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
                raise _bad(
                    f"messages[{index}].content: only text parts are supported "
                    '({"type": "text", "text": "..."}).',
                    "unsupported_content",
                    param="messages",
                )
            if not isinstance(part.get("text"), str):
                raise _bad(
                    f"messages[{index}].content: a text part needs a string.",
                    param="messages",
                )
            parts.append(part["text"])
        text = "".join(parts)
    else:
        raise _bad(
            f"messages[{index}].content must be a string or a list of text parts.",
            "invalid_content",
            param="messages",
        )
    if "\x00" in text:
        raise _bad(
            f"messages[{index}].content contains a NUL character.",
            "invalid_character",
            param="messages",
        )
    _unicode_check(text, f"messages[{index}].content", param="messages")
    return text


def _messages(raw: Any) -> list[dict[str, str]]:
    if not isinstance(raw, list) or not raw:
        raise _bad(
            "`messages` must be a non-empty list of messages.",
            "invalid_messages",
            param="messages",
        )
    messages: list[dict[str, str]] = []
    for i, message in enumerate(raw):
        if not isinstance(message, dict):
            raise _bad(
                f"messages[{i}] must be an object.",
                "invalid_messages",
                param="messages",
            )
        role = message.get("role")
        # a list or object is unhashable: `in ROLES` itself would raise (a 500)
        if not isinstance(role, str) or role not in ROLES:
            raise _bad(
                f"messages[{i}].role {role!r} is not supported: use system, developer, "
                "user or assistant.",
                "invalid_role",
                param="messages",
            )
        text = _content_text(message.get("content"), i, role)
        messages.append({"role": ROLES[role], "content": text})
    if not any(m["role"] == "user" and m["content"].strip() for m in messages):
        raise _bad(
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
        raise _bad(f"`{name}` must be a number.", "invalid_parameter", param=name)
    if not lo <= value <= hi:
        raise _bad(
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
            raise _bad(
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
            raise _bad(
                "`stop` must be a string or a list of up to 4 non-empty strings.",
                "invalid_parameter",
                param="stop",
            )
        for stop_text in stops:
            _unicode_check(stop_text, "`stop`", param="stop")
        if stops:
            params["stop"] = stops
    if body.get("n") not in (None, 1):
        raise _bad("Only `n` = 1 is supported.", "invalid_parameter", param="n")
    return params


def completion_request_parse(body: bytes) -> CompletionRequest:
    """Validate a ``/v1/chat/completions`` JSON body (UTF-8 bytes).

    Raises InvalidInput (400) or PayloadTooLarge (413, over API_MAX_PROMPT_CHARS
    characters of message content), naming the field in the message and in ``param``.
    """
    try:
        data = json.loads(body or b"null")
    # RecursionError: nested deeper than the interpreter allows (100,000 "[")
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise _bad("The request body is not valid JSON.", "invalid_json") from exc
    if not isinstance(data, dict):
        raise _bad("The request body must be a JSON object.", "invalid_json")
    model = data.get("model")
    if not isinstance(model, str) or not model.strip():
        raise _bad(
            "`model` is required (see GET /v1/models).", "missing_model", param="model"
        )
    stream = data.get("stream", False)
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise _bad(
            "`stream` must be true or false.", "invalid_parameter", param="stream"
        )
    options = data.get("stream_options")
    include_usage = False
    if options is not None:
        if not stream:
            raise _bad(
                "`stream_options` is only allowed when `stream` is true.",
                "invalid_parameter",
                param="stream_options",
            )
        if not isinstance(options, dict):
            raise _bad(
                "`stream_options` must be an object.",
                "invalid_parameter",
                param="stream_options",
            )
        include_usage = options.get("include_usage", False)
        if not isinstance(include_usage, bool):
            raise _bad(
                "`stream_options.include_usage` must be true or false.",
                "invalid_parameter",
                param="stream_options.include_usage",
            )
    cache = data.get("cache")
    if cache is not None and not isinstance(cache, bool):
        raise _bad("`cache` must be true or false.", "invalid_parameter", param="cache")
    return CompletionRequest(
        model=model.strip(),
        messages=_messages(data.get("messages")),
        params=_params(data),
        stream=stream,
        include_usage=include_usage,
        cache=cache,
    )


ENCODING_FORMATS = ("float", "base64")


@dataclass
class EmbeddingRequest:
    """A validated ``/v1/embeddings`` body.

    ``texts``: the inputs, one string per vector wanted (a single string becomes a
    list of one); ``encoding_format``: ``float`` (lists of numbers) or ``base64``
    (each vector as the base64 of its little-endian float32 values, what the official
    client asks for by default); ``dimensions``: the vector length asked for (None:
    the model's own); ``user``: the caller's end-user id (accepted, not used).
    """

    model: str
    texts: list[str]
    encoding_format: str = "float"
    dimensions: int | None = None
    user: str | None = None


def _is_token_ids(value: Any) -> bool:
    """True for OpenAI's token-id input: a list of ints, or a list of such lists."""
    if not isinstance(value, list) or not value:
        return False
    if all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return True
    return all(
        isinstance(row, list)
        and all(isinstance(v, int) and not isinstance(v, bool) for v in row)
        for row in value
    )


def _embedding_input(raw: Any) -> list[str]:
    """Return the texts of ``input``; raise InvalidInput (param ``input``).

    Limits: at most API_EMBEDDING_MAX_INPUTS texts, each non-empty and at most
    API_EMBEDDING_MAX_INPUT_CHARS characters, API_EMBEDDING_MAX_TOTAL_CHARS in all.
    Token ids are refused: a pool's tokenizer is its worker's business.
    """
    if raw is None:
        raise _bad(
            "`input` is required: a string, or a list of strings.",
            "missing_input",
            param="input",
        )
    if _is_token_ids(raw):
        raise _bad(
            "`input` as token ids is not supported: send the text itself (a string "
            "or a list of strings).",
            "unsupported_input",
            param="input",
        )
    texts = [raw] if isinstance(raw, str) else raw
    if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
        raise _bad(
            "`input` must be a string or a list of strings.",
            "invalid_input",
            param="input",
        )
    if not texts:
        raise _bad("`input` must not be an empty list.", "invalid_input", param="input")
    most = settings.API_EMBEDDING_MAX_INPUTS
    if len(texts) > most:
        raise _bad(
            f"`input` holds {len(texts):,} texts; the limit is {most:,} per request.",
            "too_many_inputs",
            param="input",
        )
    longest = settings.API_EMBEDDING_MAX_INPUT_CHARS
    for i, text in enumerate(texts):
        where = "`input`" if isinstance(raw, str) else f"input[{i}]"
        if not text:
            raise _bad(f"{where} is an empty string.", "invalid_input", param="input")
        if len(text) > longest:
            raise _bad(
                f"{where} holds {len(text):,} characters; the limit is {longest:,}.",
                "input_too_long",
                param="input",
            )
        _unicode_check(text, where, param="input")
    total = sum(len(t) for t in texts)
    if total > settings.API_EMBEDDING_MAX_TOTAL_CHARS:
        raise _bad(
            f"`input` holds {total:,} characters in all; the limit is "
            f"{settings.API_EMBEDDING_MAX_TOTAL_CHARS:,} per request.",
            "input_too_long",
            param="input",
        )
    return texts


def embedding_request_parse(body: bytes) -> EmbeddingRequest:
    """Validate a ``/v1/embeddings`` JSON body (UTF-8 bytes).

    Raises InvalidInput (400) naming the field in the message and in ``param``. Whether
    ``dimensions`` fits the model is the gateway's to say (it depends on the pool).
    """
    try:
        data = json.loads(body or b"null")
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise _bad("The request body is not valid JSON.", "invalid_json") from exc
    if not isinstance(data, dict):
        raise _bad("The request body must be a JSON object.", "invalid_json")
    model = data.get("model")
    if not isinstance(model, str) or not model.strip():
        raise _bad(
            "`model` is required (see GET /v1/models for embedding models).",
            "missing_model",
            param="model",
        )
    encoding_format = data.get("encoding_format")
    if encoding_format is None:
        encoding_format = "float"
    if encoding_format not in ENCODING_FORMATS:
        raise _bad(
            '`encoding_format` must be "float" or "base64".',
            "invalid_parameter",
            param="encoding_format",
        )
    dimensions = data.get("dimensions")
    if dimensions is not None and (
        isinstance(dimensions, bool)
        or not isinstance(dimensions, int)
        or dimensions < 1
    ):
        raise _bad(
            "`dimensions` must be a positive integer.",
            "invalid_parameter",
            param="dimensions",
        )
    user = data.get("user")
    if user is not None and not isinstance(user, str):
        raise _bad("`user` must be a string.", "invalid_parameter", param="user")
    return EmbeddingRequest(
        model=model.strip(),
        texts=_embedding_input(data.get("input")),
        encoding_format=encoding_format,
        dimensions=dimensions,
        user=user,
    )
