"""How a generation worker takes jobs: two lanes, and preemption of background work.

A base class of :class:`~inference.worker.Worker` (like
:class:`~inference.recovery.CrashRecovery`), so the worker module stays one job.

A pool has two job streams (inference/protocol.py), and a chat worker has its own
stream too (``inf:qw``, conversation affinity: :mod:`inference.affinity`), read before
them; a job of it is an interactive one:

- ``inf:q:{pool}``, interactive: what a person waits on (chat turns, API requests, a
  guard model's input moderation);
- ``inf:qb:{pool}``, background: titles, rolling summaries, fact extraction
  (:func:`inference.client.generation_run` with ``background=True``).

A free slot takes interactive jobs first, and a background job only when no
interactive one waits. When every slot is taken and at least one runs a background
job, the worker keeps reading the interactive queue; a job that arrives there takes
the slot of the newest background job, which the engine stops within one decode step
and which ends with ``error {code: "preempted"}`` (its caller sends it again). So a
turn waits for background work at most one decode step, never for a backlog of it.
Why: on the one-slot llama.cpp worker of ``make run`` the title, summary and facts of
the previous turn (about two jobs per turn) would otherwise delay the next turn's
first token by seconds.

Backlog still stays in Redis: the worker takes no more jobs than it has slots, except
for the one interactive job that displaces a background one. With several workers on
a pool, Redis hands a job to the worker blocked longest on the queue, so a full worker
may preempt although another had a free slot; only the background job's work so far
is lost.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from inference import keys, protocol, redis_types
from inference.engines.base import Engine
from inference.outage import group_gone

logger = logging.getLogger("inference.worker")

# How long a full worker blocks on its interactive queue per read, in ms. It notices a
# freed slot only between reads, so this is the longest a background job can wait
# after a slot frees; an interactive job is taken the moment it arrives.
PREEMPT_POLL_MS = 100


class JobIntake:
    """Take jobs from a pool's two lanes; the subclass provides the attributes used."""

    pool: str
    engine: Engine
    concurrency: int
    block_ms: int
    _stopping: asyncio.Event
    _running: dict[str, asyncio.Task[None]]
    _aborted: set[str]
    # job ids of running jobs taken from the background lane / stopped for another job
    _background: set[str]
    _preempted: set[str]
    # jobs whose engine finished (their slot is published free before their end)
    _freed: set[str]
    worker_id: str
    # True: re-read this worker's own pending entries before taking new ones (set at
    # start and by a failed read in RedisOutageTolerance._take)
    _pending_check: bool
    # entry ids crash recovery claimed to this worker and is handling (recovery.py)
    _reclaiming: set[str]

    @property
    def redis(self) -> aioredis.Redis:  # pragma: no cover - the Worker's
        raise NotImplementedError

    @property
    def queue_keys(self) -> list[str]:  # pragma: no cover - the Worker's
        raise NotImplementedError

    # Provided by other bases of the Worker (declared here for readers and type
    # checkers only: a stub here would shadow them, this class comes first):
    # _take(count, queues, block_ms) in RedisOutageTolerance, _run_job in Worker.
    _take: Any
    _run_job: Any

    async def _take_loop(self) -> None:
        slot_freed = asyncio.Event()
        while not self._stopping.is_set():
            if self._pending_check:
                await self._resume_pending(slot_freed)
            free = self.concurrency - len(self._running)
            if free > 0:
                await self._take_free(free, slot_freed)
            elif self._preemptible():
                await self._take_preempting(slot_freed)
            else:
                await self._slot_wait(slot_freed)

    async def _slot_wait(self, slot_freed: asyncio.Event) -> None:
        """Wait until a running job ends or the worker is asked to stop."""
        slot_freed.clear()
        stop_wait = asyncio.create_task(self._stopping.wait())
        freed_wait = asyncio.create_task(slot_freed.wait())
        await asyncio.wait({stop_wait, freed_wait}, return_when=asyncio.FIRST_COMPLETED)
        stop_wait.cancel()
        freed_wait.cancel()

    async def _take_free(self, free: int, slot_freed: asyncio.Event) -> None:
        """Fill up to ``free`` slots: jobs already waiting in this worker's own
        stream, then interactive ones, else wait up to ``block_ms`` for the first
        job of any lane."""
        own = self._own_queues()
        interactive = keys.queue_key(self.pool)
        background = keys.background_queue_key(self.pool)
        # a read's count is per stream: the own stream first, the rest from the pool's
        result = list(await self._take(free, own, None) or []) if own else []
        left = free - sum(len(entries) for _key, entries in result)
        if left > 0:
            result += await self._take(left, [interactive], None) or []
        if not any(entries for _key, entries in result):
            result = await self._take(1, [*own, interactive, background], self.block_ms)
        # own, then interactive entries first, whatever order Redis answered in
        for queue in (*own, interactive, background):
            for entry_id, fields in _entries_of(result, queue):
                if self._stopping.is_set() or len(self._running) >= self.concurrency:
                    # Stop arrived during the blocking read, or two lanes answered
                    # the same read and the first took the last slot: hand it back
                    # (an own stream's job to the pool's queue).
                    await self._requeue(entry_id, fields, queue)
                else:
                    self._start_job(entry_id, fields, slot_freed, queue)

    async def _resume_pending(self, slot_freed: asyncio.Event) -> None:
        """Start the entries delivered to this worker that it does not run.

        A read that fails after Redis delivered (a client timeout, the process
        paused) leaves its entries in this live worker's pending list, where crash
        recovery (dead workers only) never looks: the job would never run. XREADGROUP
        with id ``0`` returns this consumer's pending entries of each queue; one
        whose job is not running (and that crash recovery is not handling) starts
        while slots are free and goes back to its queue otherwise (:meth:`_requeue`).
        An entry deleted meanwhile is acknowledged. Redis still unavailable: the
        check stays due and the next loop's read waits for Redis.
        """
        try:
            reply = await self.redis.xreadgroup(
                protocol.GROUP, self.worker_id, dict.fromkeys(self.queue_keys, "0")
            )
            self._pending_check = False
            for queue in self.queue_keys:
                for entry_id, fields in _entries_of(reply, queue):
                    if entry_id in self._reclaiming:
                        continue
                    if not fields:  # deleted meanwhile
                        await self._ack(entry_id, queue)
                    elif _job_id(fields) in self._running:
                        continue
                    elif self._stopping.is_set() or len(self._running) >= (
                        self.concurrency
                    ):
                        await self._requeue(entry_id, fields, queue)
                    else:
                        logger.warning(
                            "worker %s: resuming pending entry %s of %s",
                            self.worker_id,
                            entry_id,
                            queue,
                        )
                        self._start_job(entry_id, fields, slot_freed, queue)
        except (RedisConnectionError, RedisTimeoutError, ResponseError) as exc:
            if isinstance(exc, ResponseError) and not group_gone(exc):
                raise
            self._pending_check = True  # the next read waits for Redis, then again

    def _preemptible(self) -> list[str]:
        """Running background jobs not yet asked to stop, oldest first."""
        return [
            job_id
            for job_id in self._running
            if job_id in self._background and job_id not in self._preempted
        ]

    async def _take_preempting(self, slot_freed: asyncio.Event) -> None:
        """Every slot is taken, some by background jobs: an interactive job that
        arrives displaces the newest of them."""
        queues = [*self._own_queues(), keys.queue_key(self.pool)]
        result = await self._take(1, queues, PREEMPT_POLL_MS)
        for queue in queues:
            for entry_id, fields in _entries_of(result, queue):
                victims = self._preemptible()
                if self._stopping.is_set() or not victims:
                    await self._requeue(entry_id, fields, queue)
                    continue
                self._preempted.add(victims[-1])
                self.engine.abort(victims[-1])
                logger.info(
                    "background job %s preempted for a waiting job", victims[-1]
                )
                self._start_job(entry_id, fields, slot_freed, queue)

    def _own_queues(self) -> list[str]:
        """This worker's own stream (conversation affinity, :mod:`inference.affinity`)
        when it takes one: a chat worker does; [] otherwise."""
        prefix = keys.worker_queue_prefix(self.pool)
        return [k for k in self.queue_keys if k.startswith(prefix)]

    async def _requeue(
        self, entry_id: str, fields: redis_types.RedisFields, queue: str | None = None
    ) -> None:
        """Put a delivered entry back on its queue (as a new entry) and drop ours;
        ``queue`` defaults to the pool's queue. An entry of a worker's own stream goes
        to the pool's queue (any worker may take it; same hash tag, one MULTI)."""
        queue = queue or keys.queue_key(self.pool)
        target = (
            keys.queue_key(self.pool)
            if queue.startswith(keys.worker_queue_prefix(self.pool))
            else queue
        )
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.xadd(target, fields)
            pipe.xack(queue, protocol.GROUP, entry_id)
            pipe.xdel(queue, entry_id)
            await pipe.execute()

    def _start_job(
        self,
        entry_id: str,
        fields: redis_types.RedisFields,
        slot_freed: asyncio.Event,
        queue: str,
    ) -> None:
        try:
            job = protocol.Job.from_fields(fields)
        except (ValueError, TypeError) as exc:
            logger.error("dropping malformed queue entry %s: %s", entry_id, exc)
            asyncio.create_task(self._ack(entry_id, queue))
            return
        if queue == keys.background_queue_key(self.pool):
            job.priority = protocol.PRIORITY_BACKGROUND
            self._background.add(job.job_id)
        else:
            job.priority = max(job.priority, 0)
        task = asyncio.create_task(self._run_job(entry_id, job, queue))
        self._running[job.job_id] = task

        def _done(_t: asyncio.Task[None], job_id: str = job.job_id) -> None:
            self._running.pop(job_id, None)
            self._aborted.discard(job_id)
            self._background.discard(job_id)
            self._preempted.discard(job_id)
            self._freed.discard(job_id)
            slot_freed.set()

        task.add_done_callback(_done)

    async def _ack(self, entry_id: str, queue: str | None = None) -> None:
        queue = queue or keys.queue_key(self.pool)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.xack(queue, protocol.GROUP, entry_id)
            pipe.xdel(queue, entry_id)
            await pipe.execute()


def _entries_of(result: Any, queue: str) -> list[tuple[str, redis_types.RedisFields]]:
    """The entries of ``queue`` in an XREADGROUP reply (list of ``[key, entries]``)."""
    for key, entries in result or []:
        if (key.decode() if isinstance(key, bytes) else key) == queue:
            return list(entries)
    return []


def _job_id(fields: redis_types.RedisFields) -> str | None:
    """The job id of a queue entry; None when it is malformed (:meth:`_start_job`
    drops it)."""
    try:
        return protocol.Job.from_fields(fields).job_id
    except (ValueError, TypeError):
        return None
