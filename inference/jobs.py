"""Build a generation's job and read how it ended: the one way for every caller.

The gateway's generation lifecycle (chat, API, evaluation) and the background
generations of :func:`inference.client.generation_run` (titles, summaries, fact
extraction, the guard classifier) both build their job with :func:`job_build` and read
a generation's end with :func:`events_fold`, so a job carries the same fields and a
terminal event means the same thing whichever path sent it.

The one finish-reason map (:data:`FINISH_MAP`): by how a generation ended, the status
stored for it (``UsageRecord.Status`` and ``Message.Status`` values) and the
``finish_reason`` an OpenAI client reads.

| how it ended                      | status    | OpenAI finish  |
|-----------------------------------|-----------|----------------|
| ``done`` finish ``stop``          | complete  | stop           |
| ``done`` finish ``length``        | complete  | length         |
| ``done`` finish ``cancelled``     | cancelled | stop           |
| ``done`` finish ``content_filter``| filtered  | content_filter |
| ``done`` finish ``tool_calls``    | complete  | tool_calls     |
| ``error`` (finish ``error``)      | error     | None (an error)|
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from inference import protocol

# The finish reason of a generation that ended with an ``error`` event.
FINISH_ERROR = "error"

STATUS_COMPLETE = "complete"
STATUS_CANCELLED = "cancelled"
STATUS_FILTERED = "filtered"
STATUS_ERROR = "error"

# finish reason -> (status, OpenAI finish_reason); see the module's table.
FINISH_MAP: dict[str, tuple[str, str | None]] = {
    protocol.FINISH_STOP: (STATUS_COMPLETE, "stop"),
    protocol.FINISH_LENGTH: (STATUS_COMPLETE, "length"),
    protocol.FINISH_CANCELLED: (STATUS_CANCELLED, "stop"),
    protocol.FINISH_CONTENT_FILTER: (STATUS_FILTERED, "content_filter"),
    protocol.FINISH_TOOL_CALLS: (STATUS_COMPLETE, "tool_calls"),
    FINISH_ERROR: (STATUS_ERROR, None),
}


def job_build(
    *,
    messages: list[dict[str, str]],
    params: dict[str, Any],
    timeout_s: float,
    user_ref: str = "",
    job_id: str | None = None,
    enqueued_at: float | None = None,
) -> protocol.Job:
    """Return the generation job for ``messages`` (OpenAI chat messages).

    ``params``: sampling parameters (``max_tokens`` in tokens, ...); ``timeout_s``:
    seconds after ``enqueued_at`` (epoch s, default now) at which a job still queued
    is dropped; ``job_id``: default a fresh one (:func:`protocol.new_job_id`).
    """
    now = time.time() if enqueued_at is None else enqueued_at
    return protocol.Job(
        job_id=job_id or protocol.new_job_id(),
        messages=messages,
        params=params,
        user_ref=user_ref,
        enqueued_at=now,
        deadline=now + timeout_s,
    )


def usage_spent(terminal: protocol.Event, *, tokens: int) -> protocol.Usage:
    """Return the tokens a generation spent, from its terminal event and the number of
    ``token`` events before it.

    ``done``: the engine's usage. ``error``: nothing before the first token; after
    it, the prompt (and cached) tokens the error reports (0 when it reports none,
    e.g. the web tier's watchdog wrote it) plus one completion token per ``token``
    event (each is one engine delta), as :mod:`inference.protocol` specifies.
    """
    reported = protocol.Usage.from_dict(terminal.data.get("usage"))
    if terminal.type != protocol.EVENT_ERROR:
        return reported
    if not tokens:
        return protocol.Usage()
    return protocol.Usage(
        prompt_tokens=reported.prompt_tokens,
        completion_tokens=tokens,
        cached_tokens=reported.cached_tokens,
    )


@dataclass
class GenerationEnd:
    """What a generation's events say about it, up to its first terminal event.

    ``text``: the joined ``token`` events (characters); ``tokens``: how many there
    were; ``finish_reason``: a key of :data:`FINISH_MAP` ("" while the generation
    runs: ``ended`` False); ``error_code``/``error_message`` of an ``error`` event
    (code default ``engine_error``); ``usage``: what it spent (:func:`usage_spent`);
    ``meta``: the ``meta`` event's payload ({} without one); ``ttft_ms``/
    ``latency_ms`` from a ``done`` event. ``job_id`` is set by callers that know it.
    ``tool_calls``: the calls the model made, assembled from the ``tool_call`` events
    (:class:`ToolCalls`: OpenAI's ``[{id, type, function: {name, arguments}}]``).
    """

    text: str = ""
    tokens: int = 0
    finish_reason: str = ""
    error_code: str = ""
    error_message: str = ""
    usage: protocol.Usage = field(default_factory=protocol.Usage)
    meta: dict[str, Any] = field(default_factory=dict)
    ttft_ms: int | None = None
    latency_ms: int | None = None
    job_id: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)

    @property
    def ended(self) -> bool:
        """True once a terminal event was read."""
        return bool(self.finish_reason)

    @property
    def status(self) -> str:
        """The stored status of the generation (:data:`FINISH_MAP`)."""
        return FINISH_MAP[self.finish_reason][0]

    @property
    def complete(self) -> bool:
        """True only when the model ended its answer itself (``done``, ``stop``): not
        cut by max_tokens, a cancel, an error or a timeout."""
        return self.finish_reason == protocol.FINISH_STOP and not self.error_code


def events_fold(events: Iterable[protocol.Event]) -> GenerationEnd:
    """Return what ``events`` (a generation's, in stream order) say about it.

    Reads up to the first terminal event; without one the result has ``ended``
    False and holds the text so far.
    """
    end = GenerationEnd()
    parts: list[str] = []
    calls = ToolCalls()
    for event in events:
        if event.type == protocol.EVENT_TOKEN:
            parts.append(event.data["t"])
        elif event.type == protocol.EVENT_TOOL_CALL:
            calls.add(event.data)
        elif event.type == protocol.EVENT_META:
            end.meta = event.data
        elif event.type == protocol.EVENT_DONE:
            end.finish_reason = event.data["finish_reason"]
            end.ttft_ms = event.data.get("ttft_ms")
            end.latency_ms = event.data.get("latency_ms")
        elif event.type == protocol.EVENT_ERROR:
            end.finish_reason = FINISH_ERROR
            end.error_code = event.data.get("code") or protocol.ERROR_ENGINE
            end.error_message = event.data.get("message") or ""
        if event.is_terminal:
            end.usage = usage_spent(event, tokens=len(parts))
            break
    end.text, end.tokens = "".join(parts), len(parts)
    end.tool_calls = calls.calls()
    return end


class ToolCalls:
    """Assembles a generation's ``tool_call`` events into whole calls.

    Each event's payload is ``{"index", "id"?, "name"?, "arguments_delta"}``; a call's
    ``arguments`` are its pieces joined in stream order (byte-identical to what the
    engine produced). :meth:`calls` returns OpenAI's shape, by index:
    ``[{"id": "call_…", "type": "function", "function": {"name", "arguments"}}]``.
    """

    def __init__(self) -> None:
        self._ids: dict[int, str] = {}
        self._names: dict[int, str] = {}
        self._arguments: dict[int, list[str]] = {}

    def __bool__(self) -> bool:
        return bool(self._arguments)

    def add(self, data: dict[str, Any]) -> None:
        """Add one ``tool_call`` event's payload."""
        index = int(data["index"])
        if data.get("id"):
            self._ids[index] = data["id"]
        if data.get("name"):
            self._names[index] = data["name"]
        self._arguments.setdefault(index, []).append(data.get("arguments_delta", ""))

    def calls(self) -> list[dict[str, Any]]:
        """The assembled calls, ordered by index."""
        return [
            {
                "id": self._ids.get(index, f"call_{index}"),
                "type": "function",
                "function": {
                    "name": self._names.get(index, ""),
                    "arguments": "".join(self._arguments[index]),
                },
            }
            for index in sorted(self._arguments)
        ]
