"""The schema of every object the API emits, checked by the tests (CONVENTIONS §6).

Checked by :func:`inference.protocol.schema_validate`, like the worker events of
:data:`inference.protocol.EVENT_SCHEMAS`: per object a dict of its fields, each with a
check (a type, a predicate, :func:`_nested` for an object of another schema,
:func:`_list_of` for a list of them); every field is required and no other field is
allowed, except those marked ``Optional``. The shapes are the ones the official
``openai`` client parses (its ``ChatCompletion``, ``ChatCompletionChunk``, ``Model``,
``CreateEmbeddingResponse`` and error types).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any

from inference.protocol import Optional, schema_validate

FINISH_REASONS = frozenset({"stop", "length", "content_filter", "tool_calls"})
ERROR_TYPES = frozenset(
    {
        "invalid_request_error",
        "permission_error",
        "server_error",
        "tokens",
        "insufficient_quota",
    }
)


def _nested(schema: str) -> Callable[[Any], bool]:
    """A check that a field is an object of the schema named ``schema`` (a bad one
    raises, naming its own field)."""

    def check(value: Any) -> bool:
        object_validate(schema, value)
        return True

    return check


def _list_of(schema: str, length: int | None = None) -> Callable[[Any], bool]:
    """A check that a field is a list of ``schema`` objects (of ``length`` items)."""

    def check(value: Any) -> bool:
        if not isinstance(value, list):
            return False
        if length is not None and len(value) != length:
            return False
        for item in value:
            object_validate(schema, item)
        return True

    return check


def _is(value: Any) -> Callable[[Any], bool]:
    """A check for exactly ``value`` (its type too: ``False`` is not ``0``)."""
    return lambda v: type(v) is type(value) and v == value


def _optional_str(value: Any) -> bool:
    return value is None or isinstance(value, str)


def _completion_id(value: Any) -> bool:
    return isinstance(value, str) and value.startswith("chatcmpl-") and len(value) > 9


def _usage_totals(obj: dict[str, Any]) -> bool:
    return obj["total_tokens"] == obj["prompt_tokens"] + obj["completion_tokens"]


MODEL_KINDS = frozenset({"chat", "embedding"})


def _non_negative_int(value: Any) -> bool:
    return type(value) is int and value >= 0


def _vector(value: Any) -> bool:
    """A float vector: a non-empty list of numbers, or its base64 (a length that
    decodes to whole float32 values)."""
    if isinstance(value, list):
        return bool(value) and all(type(v) in (int, float) for v in value)
    if isinstance(value, str):
        try:
            raw = base64.b64decode(value, validate=True)
        except ValueError:
            return False
        return bool(raw) and len(raw) % 4 == 0
    return False


def _embedding_usage_totals(obj: dict[str, Any]) -> bool:
    return obj["total_tokens"] == obj["prompt_tokens"]


def _embedding_indexes(obj: dict[str, Any]) -> bool:
    """Indexes 0..n-1 in order, and every vector of one length and encoding."""
    vectors = [item["embedding"] for item in obj["data"]]
    return [item["index"] for item in obj["data"]] == list(range(len(vectors))) and (
        len({(type(v), len(v)) for v in vectors}) <= 1
    )


OBJECT_SCHEMAS: dict[str, dict[str, Any]] = {
    "chat.completion.chunk": {
        "id": _completion_id,
        "object": _is("chat.completion.chunk"),
        "created": int,
        "model": str,
        "system_fingerprint": _is(None),
        "choices": _list_of("chunk_choice", length=1),
        # null on every chunk when the client asked for the final usage chunk
        "usage": Optional(_is(None)),
        # the finish chunk of an answer cut by output moderation
        "content_filter": Optional(_nested("content_filter")),
    },
    "chunk_choice": {
        "index": _is(0),
        "delta": _nested("delta"),
        "logprobs": _is(None),
        "finish_reason": lambda v: v is None or v in FINISH_REASONS,
    },
    "delta": {
        "role": Optional(_is("assistant")),
        "content": Optional(str),
        "tool_calls": Optional(_list_of("tool_call_delta", length=1)),
    },
    "tool_call_delta": {
        "index": _non_negative_int,
        "id": Optional(lambda v: isinstance(v, str) and bool(v)),
        "type": Optional(_is("function")),
        "function": _nested("function_delta"),
    },
    "function_delta": {
        "name": Optional(lambda v: isinstance(v, str) and bool(v)),
        "arguments": str,
    },
    "usage_chunk": {
        "id": _completion_id,
        "object": _is("chat.completion.chunk"),
        "created": int,
        "model": str,
        "system_fingerprint": _is(None),
        "choices": _list_of("chunk_choice", length=0),
        "usage": _nested("usage"),
    },
    "usage": {
        "prompt_tokens": int,
        "completion_tokens": int,
        "total_tokens": int,
        "prompt_tokens_details": _nested("prompt_tokens_details"),
    },
    "prompt_tokens_details": {"cached_tokens": int},
    "chat.completion": {
        "id": _completion_id,
        "object": _is("chat.completion"),
        "created": int,
        "model": str,
        "system_fingerprint": _is(None),
        "choices": _list_of("completion_choice", length=1),
        "usage": _nested("usage"),
        "content_filter": Optional(_nested("content_filter")),
    },
    "content_filter": {
        "reason": lambda v: isinstance(v, str) and bool(v),
        "appeal_url": lambda v: (
            isinstance(v, str)
            and v.startswith("/v1/moderation/completions/chatcmpl-")
            and v.endswith("/appeal")
        ),
    },
    "completion_choice": {
        "index": _is(0),
        "message": _nested("message"),
        "logprobs": _is(None),
        "finish_reason": lambda v: v in FINISH_REASONS,
    },
    "message": {
        "role": _is("assistant"),
        "content": _optional_str,
        "refusal": _is(None),
        "tool_calls": Optional(
            lambda v: isinstance(v, list) and bool(v) and _list_of("tool_call")(v)
        ),
    },
    "tool_call": {
        "id": lambda v: isinstance(v, str) and bool(v),
        "type": _is("function"),
        "function": _nested("function_call"),
    },
    "function_call": {
        "name": lambda v: isinstance(v, str) and bool(v),
        "arguments": str,
    },
    "error": {"error": _nested("error_detail")},
    "error_detail": {
        "message": lambda v: isinstance(v, str) and bool(v),
        "type": lambda v: v in ERROR_TYPES,
        "param": _optional_str,
        "code": _optional_str,
        # a refusal by moderation (or the suspension it caused): the event to appeal
        "moderation_event_id": Optional(
            lambda v: v is None or (isinstance(v, int) and not isinstance(v, bool))
        ),
    },
    "list": {
        "object": _is("list"),
        "data": _list_of("model"),
    },
    "model": {
        "id": str,
        "object": _is("model"),
        "created": int,
        "owned_by": str,
        "root": str,
        "kind": lambda v: v in MODEL_KINDS,
    },
    "embedding_list": {
        "object": _is("list"),
        "data": lambda v: isinstance(v, list) and bool(v) and _list_of("embedding")(v),
        "model": str,
        "usage": _nested("embedding_usage"),
    },
    "embedding": {
        "object": _is("embedding"),
        "index": _non_negative_int,
        "embedding": _vector,
    },
    "embedding_usage": {
        "prompt_tokens": _non_negative_int,
        "total_tokens": _non_negative_int,
    },
}


# Checks of a whole object beyond its fields' own.
def _tool_call_delta_shape(obj: dict[str, Any]) -> bool:
    """A call's first piece has ``id``, ``type`` and ``function.name`` together;
    a later piece none of them."""
    first = ("id" in obj, "type" in obj, "name" in obj["function"])
    return first in ((True, True, True), (False, False, False))


def _message_content(obj: dict[str, Any]) -> bool:
    """``content`` is null only beside ``tool_calls``."""
    return obj["content"] is not None or bool(obj.get("tool_calls"))


_OBJECT_CHECKS: dict[str, Callable[[dict[str, Any]], bool]] = {
    "tool_call_delta": _tool_call_delta_shape,
    "message": _message_content,
    "usage": _usage_totals,
    "embedding_list": _embedding_indexes,
    "embedding_usage": _embedding_usage_totals,
}


def object_validate(schema: str, obj: Any, *, path: str = "") -> None:
    """Check ``obj`` (decoded JSON) against the schema named ``schema``.

    Raises ``ValueError`` naming the first missing, extra or ill-typed field by its
    path (e.g. ``chat.completion.chunk.choices[0].delta.role``).
    """
    fields = OBJECT_SCHEMAS.get(schema)
    if fields is None:
        raise ValueError(f"unknown schema {schema!r}")
    where = path or schema
    schema_validate(where, fields, obj)
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


def validate_embedding_list(obj: Any) -> None:
    """Check ``POST /v1/embeddings``' ``list`` of embeddings; raise ValueError."""
    object_validate("embedding_list", obj)


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
