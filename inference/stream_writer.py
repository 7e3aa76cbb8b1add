"""The worker's token writer: a job's token events in order, batched while Redis is busy.

Kept apart from :mod:`inference.worker` so the worker module stays one job; the writes
themselves go through the worker's outage-tolerant
:meth:`~inference.outage.RedisOutageTolerance._publish_batch` (journal, lost-stream
restore, retries while Redis restarts).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from inference import protocol, redis_types

# Writes a job's events in order in one round trip: (job id, events' fields) -> None.
Publish = Callable[[str, list[redis_types.RedisFields]], Awaitable[None]]


class TokenWriter:
    """Append a job's token events in order, without making the engine wait.

    :meth:`add` returns at once; one flush at a time writes every token that piled up
    meanwhile in one pipeline (one round trip, one event per token as the protocol
    says), so a fast engine or many concurrent jobs cost a round trip per batch, not
    per token. The first token of an answer is written as soon as it comes.
    """

    def __init__(self, publish: Publish, job_id: str) -> None:
        self._publish = publish
        self._job_id = job_id
        self._pending: list[redis_types.RedisFields] = []
        self._flush: asyncio.Task[None] | None = None

    def add(self, text: str) -> None:
        """Queue one token event; start a flush unless one is running."""
        self.add_event(protocol.token_fields(text))

    def add_event(self, fields: redis_types.RedisFields) -> None:
        """Queue one event (a ``tool_call``), in order with the tokens."""
        self._pending.append(fields)
        if self._flush is None or self._flush.done():
            if self._flush is not None:
                self._flush.result()  # a failed write ends the job
            self._flush = asyncio.create_task(self._write())

    async def _write(self) -> None:
        while self._pending:
            batch, self._pending = self._pending, []
            await self._publish(self._job_id, batch)

    async def flushed(self) -> None:
        """Wait until every queued token is written (raises what a write raised)."""
        while self._flush is not None:
            flush, self._flush = self._flush, None
            await flush
            if self._pending:
                self._flush = asyncio.create_task(self._write())

    async def close(self) -> None:
        """Stop writing (the job ended or failed); nothing queued is written after."""
        self._pending = []
        if self._flush is not None:
            self._flush.cancel()  # no-op when done
            # retrieves a failed write's exception too (else asyncio logs it unretrieved)
            await asyncio.gather(self._flush, return_exceptions=True)
        self._flush = None
