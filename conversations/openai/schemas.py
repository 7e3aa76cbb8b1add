"""The schema of every object the API emits, checked by the tests (CONVENTIONS §6).

In the style of :data:`inference.protocol.EVENT_SCHEMAS`: per object a dict of its
fields, each with a check (a type, a predicate, a :class:`Nested` object or a
:class:`ListOf` objects); every field is required and no other field is allowed,
except those marked :class:`Optional`. The shapes are the ones the official
``openai`` client parses (its ``ChatCompletion``, ``ChatCompletionChunk``, ``Model``
and error types).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

FINISH_REASONS = frozenset({"stop", "length", "content_filter"})
ERROR_TYPES = frozenset(
    {
        "invalid_request_error",
        "permission_error",
        "server_error",
        "tokens",
        "insufficient_quota",
    }
)


@dataclass(frozen=True)
class Optional:
    """Marks a field that may be absent; when present it must pass ``check``."""

    check: Any


@dataclass(frozen=True)
class Nested:
    """The field is an object of the schema named ``schema``."""

    schema: str


@dataclass(frozen=True)
class ListOf:
    """The field is a list of ``schema`` objects, of ``length`` items if given."""

    schema: str
    length: int | None = None


def _is(value: Any) -> Callable[[Any], bool]:
    """A check for exactly ``value`` (its type too: ``False`` is not ``0``)."""
    return lambda v: type(v) is type(value) and v == value


def _optional_str(value: Any) -> bool:
    return value is None or isinstance(value, str)


def _completion_id(value: Any) -> bool:
    return isinstance(value, str) and value.startswith("chatcmpl-") and len(value) > 9


def _usage_totals(obj: dict[str, Any]) -> bool:
    return obj["total_tokens"] == obj["prompt_tokens"] + obj["completion_tokens"]


OBJECT_SCHEMAS: dict[str, dict[str, Any]] = {
    "chat.completion.chunk": {
        "id": _completion_id,
        "object": _is("chat.completion.chunk"),
        "created": int,
        "model": str,
        "system_fingerprint": _is(None),
        "choices": ListOf("chunk_choice", length=1),
        # null on every chunk when the client asked for the final usage chunk
        "usage": Optional(_is(None)),
    },
    "chunk_choice": {
        "index": _is(0),
        "delta": Nested("delta"),
        "logprobs": _is(None),
        "finish_reason": lambda v: v is None or v in FINISH_REASONS,
    },
    "delta": {
        "role": Optional(_is("assistant")),
        "content": Optional(str),
    },
    "usage_chunk": {
        "id": _completion_id,
        "object": _is("chat.completion.chunk"),
        "created": int,
        "model": str,
        "system_fingerprint": _is(None),
        "choices": ListOf("chunk_choice", length=0),
        "usage": Nested("usage"),
    },
    "usage": {
        "prompt_tokens": int,
        "completion_tokens": int,
        "total_tokens": int,
        "prompt_tokens_details": Nested("prompt_tokens_details"),
    },
    "prompt_tokens_details": {"cached_tokens": int},
    "chat.completion": {
        "id": _completion_id,
        "object": _is("chat.completion"),
        "created": int,
        "model": str,
        "system_fingerprint": _is(None),
        "choices": ListOf("completion_choice", length=1),
        "usage": Nested("usage"),
    },
    "completion_choice": {
        "index": _is(0),
        "message": Nested("message"),
        "logprobs": _is(None),
        "finish_reason": lambda v: v in FINISH_REASONS,
    },
    "message": {
        "role": _is("assistant"),
        "content": str,
        "refusal": _is(None),
    },
    "error": {"error": Nested("error_detail")},
    "error_detail": {
        "message": lambda v: isinstance(v, str) and bool(v),
        "type": lambda v: v in ERROR_TYPES,
        "param": _optional_str,
        "code": _optional_str,
    },
    "list": {
        "object": _is("list"),
        "data": ListOf("model"),
    },
    "model": {
        "id": str,
        "object": _is("model"),
        "created": int,
        "owned_by": str,
        "root": str,
    },
}

# Checks of a whole object beyond its fields' own.
_OBJECT_CHECKS: dict[str, Callable[[dict[str, Any]], bool]] = {
    "usage": _usage_totals,
}


def _ok(check: Any, value: Any, path: str) -> bool:
    if isinstance(check, Nested):
        object_validate(check.schema, value, path=path)
        return True
    if isinstance(check, ListOf):
        if not isinstance(value, list):
            return False
        if check.length is not None and len(value) != check.length:
            return False
        for i, item in enumerate(value):
            object_validate(check.schema, item, path=f"{path}[{i}]")
        return True
    if isinstance(check, type):
        # bool is an int in Python, never in JSON
        return isinstance(value, check) and not (
            check is int and isinstance(value, bool)
        )
    return bool(check(value))


def object_validate(schema: str, obj: Any, *, path: str = "") -> None:
    """Check ``obj`` (decoded JSON) against the schema named ``schema``.

    Raises ``ValueError`` naming the first missing, extra or ill-typed field by its
    path (e.g. ``chat.completion.chunk.choices[0].delta.role``).
    """
    fields = OBJECT_SCHEMAS.get(schema)
    if fields is None:
        raise ValueError(f"unknown schema {schema!r}")
    where = path or schema
    if not isinstance(obj, dict):
        raise ValueError(f"{where}: not an object: {obj!r}")
    extra = set(obj) - set(fields)
    if extra:
        raise ValueError(f"{where}: unexpected fields {sorted(extra)}")
    for name, check in fields.items():
        if isinstance(check, Optional):
            if name not in obj:
                continue
            check = check.check
        elif name not in obj:
            raise ValueError(f"{where}: missing field {name!r}")
        if not _ok(check, obj[name], f"{where}.{name}"):
            raise ValueError(f"{where}: bad value for {name!r}: {obj[name]!r}")
    whole = _OBJECT_CHECKS.get(schema)
    if whole is not None and not whole(obj):
        raise ValueError(f"{where}: inconsistent object: {obj!r}")


def validate_chunk(obj: Any) -> None:
    """Check one ``chat.completion.chunk`` with a choice; raise ValueError."""
    object_validate("chat.completion.chunk", obj)


def validate_usage_chunk(obj: Any) -> None:
    """Check the final usage chunk (no choices, a ``usage``); raise ValueError."""
    object_validate("usage_chunk", obj)


def validate_completion(obj: Any) -> None:
    """Check a non-streamed ``chat.completion``; raise ValueError."""
    object_validate("chat.completion", obj)


def validate_error(obj: Any) -> None:
    """Check an error body ``{"error": {...}}``; raise ValueError."""
    object_validate("error", obj)


def validate_model_list(obj: Any) -> None:
    """Check ``GET /v1/models``'s ``list``; raise ValueError."""
    object_validate("list", obj)


def validate_stream_data(data: str) -> str:
    """Check one SSE ``data:`` payload of a streamed completion; return its kind.

    The kinds: ``"done"`` (``[DONE]``), ``"chunk"``, ``"usage_chunk"`` or ``"error"``
    (a generation that failed after the stream began). Raises ValueError.
    """
    if data == "[DONE]":
        return "done"
    obj = json.loads(data)
    if isinstance(obj, dict) and "error" in obj:
        validate_error(obj)
        return "error"
    if isinstance(obj, dict) and obj.get("choices") == []:
        validate_usage_chunk(obj)
        return "usage_chunk"
    validate_chunk(obj)
    return "chunk"
