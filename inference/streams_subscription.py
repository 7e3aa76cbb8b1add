"""One follower's view of a generation stream, fed by the stream hub's reader.

A :class:`Subscription` holds the events of one stream (``inf:gen:{job_id}``) that the
hub's reader (:class:`inference.streams.StreamHub`) read after the follower's position
``after`` (a stream entry id ``"ms-seq"``) and that the follower has not taken yet;
:meth:`Subscription.next` hands them over in stream order, or raises
:class:`StreamReadError` once the hub's reads failed for good. No I/O of its own: a
subscription only buffers, and tells its hub when it moves or leaves.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from redis.exceptions import RedisError

from inference import protocol

if TYPE_CHECKING:
    from inference.streams import StreamHub


class StreamReadError(RedisError):
    """The hub's read of the generation streams failed (its cause says why)."""


def id_key(entry_id: str) -> tuple[int, int]:
    """Return a stream entry id ``"ms-seq"`` as a comparable pair."""
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


def wake_waiter(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


class Subscription:
    """One follower's view of a generation stream, fed by its hub's reader.

    Events after ``after`` arrive in order; :meth:`next` returns those that arrived
    since its last call. Not thread-safe: use it on the loop it was made on.
    """

    __slots__ = ("_error", "_events", "_hub", "_pos", "_waiter", "after", "due", "key")

    def __init__(self, hub: StreamHub, key: str, after: str) -> None:
        self._hub = hub
        self.key = key
        self.after = after
        self._pos = id_key(after)
        self._events: list[protocol.Event] = []
        self._error: BaseException | None = None
        self._waiter: asyncio.Future[None] | None = None
        self.due = 0.0  # loop time (s) before which the follower calls next()

    async def next(self, *, timeout_s: float) -> list[protocol.Event]:
        """Return the events that arrived since the last call, in stream order.

        Waits up to ``timeout_s`` seconds for the first one; ``[]`` when none came.
        Raises :class:`StreamReadError` once the hub's read failed (events that
        arrived before the failure are returned first).
        """
        if not self._events and self._error is None:
            loop = asyncio.get_running_loop()
            waiter = self._waiter = loop.create_future()
            timer = loop.call_later(timeout_s, wake_waiter, waiter)
            try:
                await waiter
            finally:
                timer.cancel()
                self._waiter = None
        if self._events:
            events, self._events = self._events, []
            return events
        if self._error is not None:
            raise StreamReadError(str(self._error)) from self._error
        return []

    def seek(self, after: str) -> None:
        """Read the stream again from entry id ``after`` (a fallback restart)."""
        self.after = after
        self._pos = id_key(after)
        self._events = []
        self._hub._poke()

    def close(self) -> None:
        """Stop following the stream (no I/O: safe while cancelled)."""
        self._hub._remove(self)

    def _deliver(
        self,
        asked: tuple[int, int],
        events: list[protocol.Event],
        last: tuple[int, int],
    ) -> None:
        """Take the events of one XREAD round that asked the key from ``asked``
        (``last``: the position of the round's last entry)."""
        if self._pos < asked:
            return  # it wants older entries (resume, seek): the next round reads them
        if self._pos == asked:
            new = events  # the usual case: no entry's id parsed
        elif any(event.tokens > 1 for event in events):
            # a run of tokens read joined may straddle its position (it subscribed
            # while the round was pending): the next round asks from its position,
            # entry by entry (:func:`inference.streams_joined.joined_args`)
            return
        else:
            new = [event for event in events if id_key(event.id) > self._pos]
        if not new:
            return
        self._events.extend(new)
        self._pos = last
        self.after = new[-1].id
        if self._waiter is not None:
            wake_waiter(self._waiter)

    def _fail(self, exc: BaseException) -> None:
        self._error = exc
        if self._waiter is not None:
            wake_waiter(self._waiter)
