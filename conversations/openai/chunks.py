"""Render what the API sends: completion objects, usage, SSE lines (pure functions).

The shapes are OpenAI's (``chat.completion``, ``chat.completion.chunk``, ``list`` of
``model``, ``list`` of ``embedding``), key order included, and :mod:`.schemas` states
them for the tests.
"""

from __future__ import annotations

import base64
import json
import struct
from typing import Any

from inference import protocol

DONE_LINE = "data: [DONE]\n\n"


def completion_id(job_id: str) -> str:
    """Return the completion's ``id``: ``chatcmpl-`` and the job's UUID hex."""
    return "chatcmpl-" + job_id.replace("-", "")


def appeal_path(cid: str) -> str:
    """The path that appeals the cut of completion ``cid`` by output moderation."""
    return f"/v1/moderation/completions/{cid}/appeal"


def moderation_json(cid: str, reason: str) -> dict[str, Any]:
    """The ``content_filter`` object of an answer cut by the content filter
    (``finish_reason: "content_filter"``): the sentence naming the category and the
    path to appeal the cut (POST, docs/safety.md "Appeals")."""
    return {
        "reason": reason or "This answer was stopped by the content filter.",
        "appeal_url": appeal_path(cid),
    }


def usage_json(usage: protocol.Usage) -> dict[str, Any]:
    """OpenAI's ``usage`` object (tokens)."""
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.total_tokens,
        "prompt_tokens_details": {"cached_tokens": usage.cached_tokens},
    }


def data_line(obj: Any) -> str:
    """Return one SSE ``data:`` line for ``obj`` (JSON, non-ASCII kept as is)."""
    return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n"


def chunk_json(
    *,
    cid: str,
    created: int,
    model: str,
    delta: dict[str, Any],
    finish_reason: str | None = None,
    include_usage: bool = False,
    moderation: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Return one ``chat.completion.chunk`` with a single choice.

    ``created`` is in epoch seconds. With ``include_usage`` the chunk carries
    ``"usage": null``, as OpenAI's do when the final usage chunk is asked for.
    ``content_filter`` (:func:`moderation_json`) goes on the finish chunk of a cut answer.
    """
    obj: dict[str, Any] = {
        "id": cid,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "system_fingerprint": None,
        "choices": [
            {
                "index": 0,
                "delta": delta,
                "logprobs": None,
                "finish_reason": finish_reason,
            }
        ],
    }
    if include_usage:
        obj["usage"] = None
    if moderation is not None:
        obj["content_filter"] = moderation
    return obj


def tool_call_delta(
    *, index: int, arguments: str, id: str | None = None, name: str | None = None
) -> dict[str, Any]:
    """Return a chunk delta carrying one piece of tool call ``index``: the first
    piece (``id`` and ``name`` given) is ``{"index", "id", "type": "function",
    "function": {"name", "arguments"}}``, later ones ``{"index", "function":
    {"arguments"}}`` (OpenAI's streamed shape)."""
    call: dict[str, Any] = {"index": index}
    if id is not None:
        call["id"] = id
        call["type"] = "function"
    function: dict[str, Any] = {}
    if name is not None:
        function["name"] = name
    function["arguments"] = arguments
    call["function"] = function
    return {"tool_calls": [call]}


def usage_chunk_json(
    *, cid: str, created: int, model: str, usage: protocol.Usage
) -> dict[str, Any]:
    """Return the final chunk of ``stream_options.include_usage``: no choices, the
    whole generation's usage."""
    obj = chunk_json(cid=cid, created=created, model=model, delta={})
    obj["choices"], obj["usage"] = [], usage_json(usage)
    return obj


def completion_json(
    *,
    cid: str,
    created: int,
    model: str,
    content: str,
    finish_reason: str,
    usage: protocol.Usage,
    moderation: dict[str, Any] | None = None,
    tool_calls: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Return the non-streamed ``chat.completion`` (``created`` in epoch seconds);
    ``content_filter`` as for :func:`chunk_json`. With ``tool_calls`` (OpenAI's
    ``[{id, type, function: {name, arguments}}]``) the message carries them and its
    ``content`` is null when the model wrote no text."""
    message: dict[str, Any] = {
        "role": "assistant",
        "content": content,
        "refusal": None,
    }
    if tool_calls:
        message["content"] = content or None
        message["tool_calls"] = tool_calls
    obj: dict[str, Any] = {
        "id": cid,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "system_fingerprint": None,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": finish_reason,
            }
        ],
        "usage": usage_json(usage),
    }
    if moderation is not None:
        obj["content_filter"] = moderation
    return obj


def model_list_json(models: list[tuple[str, str, str]]) -> dict[str, Any]:
    """Return ``GET /v1/models``'s ``list`` from ``(id, root model, kind)`` triples.

    ``kind`` (``chat`` or ``embedding``) is our extension: which endpoint serves the
    model (the official clients keep unknown fields).
    """
    return {
        "object": "list",
        "data": [
            {
                "id": model_id,
                "object": "model",
                "created": 0,
                "owned_by": "chatsite",
                "root": root,
                "kind": kind,
            }
            for model_id, root, kind in models
        ],
    }


def vector_base64(vector: list[float]) -> str:
    """Return a vector as OpenAI's ``base64`` encoding: its values as little-endian
    float32, base64-encoded (the official clients decode it with numpy's
    ``frombuffer(..., dtype="float32")``)."""
    return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()


def embedding_list_json(
    *, vectors: list[list[float]], model: str, prompt_tokens: int, encoding_format: str
) -> dict[str, Any]:
    """Return ``POST /v1/embeddings``' ``list``: one ``embedding`` per input, in order.

    ``encoding_format`` ``float`` gives each vector as a list of numbers, ``base64``
    as :func:`vector_base64`; ``prompt_tokens`` are the tokens the model read.
    """
    encode = vector_base64 if encoding_format == "base64" else list
    return {
        "object": "list",
        "data": [
            {"object": "embedding", "index": i, "embedding": encode(vector)}
            for i, vector in enumerate(vectors)
        ],
        "model": model,
        "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens},
    }
