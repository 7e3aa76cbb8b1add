"""What :func:`gateway.generations.follow.generation_follow` yields: released text,
tool-call pieces, the worker's meta, idle ticks, queue positions, the end with its
outcome, or a broken stream (each with the stream entry id it resumes after).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from chatsite.errors import DomainError
from gateway.generations.outcome import Outcome


@dataclass(slots=True)
class Delta:
    """Released answer text (whole characters); ``event_id`` resumes after it;
    ``tokens`` counts the token events it covers."""

    text: str
    event_id: str
    tokens: int = 0


@dataclass
class Meta:
    """The worker's (or the cache's) ``meta`` event: ``{"model", "worker", ...}``."""

    data: dict[str, Any]
    event_id: str


@dataclass
class ToolCall:
    """One piece of a tool call (a ``tool_call`` event): ``index`` numbers the calls
    from 0; the first piece of a call has ``id`` and ``name``; ``arguments`` is this
    piece's argument text (the call's arguments are its pieces joined)."""

    index: int
    arguments: str
    event_id: str
    id: str | None = None
    name: str | None = None


@dataclass
class Idle:
    """Nothing arrived for READ_BLOCK_MS ms (a surface may send a heartbeat)."""


@dataclass
class Queued:
    """The job still waits for a free worker: ``position`` 1 = it is next, 0 = it
    left the queue (a worker is starting it). Yielded after an :class:`Idle` while
    nothing of the generation arrived yet, when the follower asked for it."""

    position: int


@dataclass
class Ended:
    """The generation ended and is settled: ``outcome`` is what was stored/billed."""

    outcome: Outcome
    event_id: str


@dataclass
class Broken:
    """The stream cannot be followed any further (Redis or the database failed).

    ``error`` is retryable; a chat answer is settled later by the reaper.
    """

    error: DomainError


Item = Delta | ToolCall | Meta | Idle | Queued | Ended | Broken
