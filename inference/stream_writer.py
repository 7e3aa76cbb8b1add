"""The worker's token writer: every running job's token events in order, written
together while Redis is busy.

Kept apart from :mod:`inference.worker` so the worker module stays one job; the writes
themselves go through the worker's outage-tolerant
:meth:`~inference.outage.RedisOutageTolerance._publish_batches` (journal, lost-stream
restore, retries while Redis restarts).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from inference import protocol, redis_types

# Writes jobs' events, each job's in order, in one round trip: {job id: its events'
# fields} -> {job id: what failed its write} (the jobs whose write failed).
Publish = Callable[
    [dict[str, list[redis_types.RedisFields]]], Awaitable[dict[str, BaseException]]
]


class StreamWriter:
    """Append the token events of a worker's running jobs, without making an engine
    wait, one round trip for all of them.

    :meth:`add` returns at once; one flush at a time writes every event that piled up
    meanwhile, of every job, in one pipeline (one event per token as the protocol
    says). So at 50 running jobs a round trip carries the tokens that all of them made
    since the last one, not one job's. The first event after an idle moment is
    written on the event loop's next turn. A job's events are written in the order
    they were added; a failed write fails only the jobs whose events it carried.
    """

    def __init__(self, publish: Publish) -> None:
        self._publish = publish
        self._pending: dict[str, list[redis_types.RedisFields]] = {}
        self._writing: frozenset[str] = frozenset()  # jobs in the flush under way
        self._failed: dict[str, BaseException] = {}
        self._flush: asyncio.Task[None] | None = None

    def add(self, job_id: str, fields: redis_types.RedisFields) -> None:
        """Queue one event of ``job_id``; start a flush unless one is running.

        Raises what failed an earlier write of this job's events.
        """
        failed = self._failed.get(job_id)
        if failed is not None:
            raise failed
        self._pending.setdefault(job_id, []).append(fields)
        if self._flush is None or self._flush.done():
            self._flush = asyncio.create_task(self._write())

    async def _write(self) -> None:
        while self._pending:
            batches, self._pending = self._pending, {}
            self._writing = frozenset(batches)
            try:
                failed = await self._publish(batches)
            except Exception as exc:  # noqa: BLE001 - it fails the jobs it carried
                failed = dict.fromkeys(batches, exc)
            finally:
                self._writing = frozenset()
            self._failed.update(failed)

    async def flushed(self, job_id: str) -> None:
        """Wait until every queued event of ``job_id`` is written (raises what failed
        its write). Cancelling the wait leaves the flush, which other jobs share,
        running."""
        while job_id in self._pending or job_id in self._writing:
            if self._flush is None or self._flush.done():
                self._flush = asyncio.create_task(self._write())
            await asyncio.shield(self._flush)
        failed = self._failed.get(job_id)
        if failed is not None:
            raise failed

    def close(self, job_id: str) -> None:
        """Forget ``job_id`` (it ended or failed): nothing still queued of it is
        written (a flush already under way finishes)."""
        self._pending.pop(job_id, None)
        self._failed.pop(job_id, None)

    async def aclose(self) -> None:
        """Wait for the flush under way (the worker stops)."""
        if self._flush is not None:
            await asyncio.gather(self._flush, return_exceptions=True)


class TokenWriter:
    """One job's side of a :class:`StreamWriter`: its token and tool-call events."""

    def __init__(self, writer: StreamWriter, job_id: str) -> None:
        self._writer = writer
        self._job_id = job_id

    def add(self, text: str) -> None:
        """Queue one token event (raises what failed an earlier write of the job)."""
        self._writer.add(self._job_id, protocol.token_fields(text))

    def add_event(self, fields: redis_types.RedisFields) -> None:
        """Queue one event (a ``tool_call``), in order with the tokens."""
        self._writer.add(self._job_id, fields)

    async def flushed(self) -> None:
        """Wait until every queued event is written (raises what a write raised)."""
        await self._writer.flushed(self._job_id)

    async def close(self) -> None:
        """Stop writing (the job ended or failed); nothing queued is written after."""
        self._writer.close(self._job_id)
