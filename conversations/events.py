"""Schemas of the chat's SSE payloads to the browser (DESIGN §8).

The relay (:mod:`conversations.sse`) writes these events; ``static/chat.js`` reads
them. Each schema is checked by the tests on real streams
(``tests/conversations/test_events.py``) with :func:`sse_validate`.

- ``token``: ``{"t"}`` — released answer text (several deltas coalesced);
- ``meta``: the worker's ``meta`` event as is (:data:`inference.protocol.EVENT_SCHEMAS`);
- ``queue``: ``{"position"}`` — the job still waits for a free worker, ``position``
  1 = next in line, 0 = a worker is taking it (sent about once a second, only before
  the first ``meta``);
- ``done``: the stored answer (:func:`conversations.sse.message_payload`);
- ``error``: a failed answer (the stored answer plus ``code``/``message``/retry
  fields), or a stream that broke (``code``, ``message``, ``message_id``, retry
  fields only);
- ``tool_step``: one tool step's block, running or finished
  (:func:`conversations.sse_steps.tool_step_payload`): the tool loop's relay sends it, and
  ``static/chat.js`` inserts its ``html`` into the answer (``ChatTools.insertStep``);
- ``next``: ``{"message_id", "stream_url", "stop_url"}`` — the tool step ended and the
  turn's next message is generated; its frames follow in the same response;
- ``step_end``: ``{"message_id", "state"}`` — the turn ended at a tool step ("stopped"
  by the user, or "limit").
"""

from __future__ import annotations

from typing import Any

from inference import protocol
from inference.protocol import Optional


def _optional_int(value: Any) -> bool:
    return value is None or (isinstance(value, int) and not isinstance(value, bool))


def _citations(value: Any) -> bool:
    return isinstance(value, list) and all(
        isinstance(c, dict)
        and set(c) == {"number", "title", "passage", "url"}
        and isinstance(c["number"], int)
        and isinstance(c["passage"], int)
        and isinstance(c["title"], str)
        and isinstance(c["url"], str)
        for c in value
    )


SSE_QUEUE = "queue"
SSE_TOOL_STEP = "tool_step"
_STEP_STATES = {"running", "done", "error", "missing"}
# The first frame of an answer streamed in its POST's response (conversations.sse.
# turn_stream_response): what the JSON of a started turn carries.
SSE_TURN = "turn"
# After an answer that called tools: the turn's next message, whose generation the
# same response relays next (``stream_url``/``stop_url`` to follow it on their own).
SSE_NEXT = "next"
# A turn whose tool step ended without a next message: ``state`` "stopped" (the user
# stopped it) or "limit" (a round past CHAT_TOOL_MAX_STEPS).
SSE_STEP_END = "step_end"


def _position(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


_USAGE = {"prompt_tokens": int, "completion_tokens": int, "cached_tokens": int}
_STATUSES = {"complete", "cancelled", "error", "filtered"}

_ANSWER: dict[str, Any] = {
    "message_id": str,
    "status": lambda v: v in _STATUSES,
    "finish_reason": str,
    "model": str,
    "usage": _USAGE,
    "ttft_ms": _optional_int,
    "latency_ms": _optional_int,
    "html": str,
    "content": str,
    "error": str,
    "cache": lambda v: v in {"", *protocol.CACHE_KINDS},
    "citations": _citations,
    "memory_unavailable": bool,
}
_RETRY = {
    "retryable": bool,
    "retry_after_s": _optional_int,
}

_TURN: dict[str, Any] = {
    "conversation": {"id": str, "title": str, "url": str, "created": bool},
    "user_message": {"id": str, "edit_url": str},
    "thread_url": str,
    "assistant_message": {
        "id": str,
        "regenerate_url": str,
        "status": str,
        "stream_url": str,
        "stop_url": str,
        "feedback_url": str,
    },
}

SSE_SCHEMAS: dict[str, dict[str, Any]] = {
    SSE_TURN: _TURN,
    "token": {"t": str},
    "meta": protocol.EVENT_SCHEMAS[protocol.EVENT_META],
    SSE_QUEUE: {"position": _position},
    SSE_TOOL_STEP: {
        "message_id": str,
        "index": _position,
        "state": lambda v: v in _STEP_STATES,
        "html": str,
    },
    SSE_NEXT: {"message_id": str, "stream_url": str, "stop_url": str},
    SSE_STEP_END: {"message_id": str, "state": lambda v: v in {"stopped", "limit"}},
    "done": _ANSWER,
    # a failed answer carries the stored answer; a broken stream only the error
    "error": {
        "code": str,
        "message": str,
        "message_id": str,
        **_RETRY,
        **{k: Optional(v) for k, v in _ANSWER.items() if k != "message_id"},
    },
}


def sse_validate(event: str, payload: Any) -> None:
    """Check a browser SSE payload against its schema; raise ValueError if it does not fit."""
    schema = SSE_SCHEMAS.get(event)
    if schema is None:
        raise ValueError(f"unknown SSE event {event!r}")
    protocol.schema_validate(f"sse {event}", schema, payload)
