"""Crash recovery of the inference workers: take over the jobs of a dead worker.

Every ``reclaim_s`` seconds a worker looks at its pool's pending entries
(delivered, not acknowledged) and claims those owned by a consumer whose heartbeat is
older than ``worker_ttl_s`` (a live worker's long job is never taken, however long it
runs). A claimed job that emitted no token is re-queued, at most
:data:`~inference.protocol.MAX_RETRIES` times; one that did (or that ran out of retries)
ends with an ``error`` event ``worker_lost``; its partial text stays on the stream, and
the event's ``usage`` reports what was spent on it (:meth:`CrashRecovery._error_usage`:
the prompt, counted by this worker's engine of the same pool, and the token events on
the stream), which the gateway bills. XCLAIM is atomic, so of several workers
reclaiming at once exactly one handles each entry.

Kept apart from :mod:`inference.worker` because it is a job of its own (scanning the
consumer group, claiming, deciding retry or ``worker_lost``); it runs on the worker's
loop and uses the worker's Redis connection and terminal/ack/requeue steps, which is
why it is a base class of :class:`~inference.worker.Worker` rather than a service.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, cast

import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from inference import keys, metrics, protocol, redis_types
from inference.engines.base import Engine

logger = logging.getLogger("inference.worker")


class CrashRecovery:
    """The recovery loop of a worker (mixed into :class:`inference.worker.Worker`).

    Uses the worker's ``redis``, ``pool``, ``worker_id``, ``worker_ttl_s`` (s),
    ``reclaim_s`` (s), ``stream_ttl_s`` (s) and its ``_ack``/``_requeue``/``_terminal``
    steps; counts ``jobs_reclaimed`` and ``reclaim_scans`` (the latter is published
    in the heartbeat, so tests and operators can see that scans happen).
    """

    pool: str
    worker_id: str
    worker_ttl_s: float
    reclaim_s: float
    stream_ttl_s: int
    jobs_reclaimed: int
    reclaim_scans: int
    _closing: bool
    # entry ids claimed to this worker and being recovered: the take loop leaves them
    # alone when it re-reads its own pending entries (JobIntake._resume_pending)
    _reclaiming: set[str]
    engine: Engine

    @property
    def redis(self) -> aioredis.Redis:  # pragma: no cover - the Worker's
        raise NotImplementedError

    @property
    def queue_keys(self) -> list[str]:  # pragma: no cover - the Worker's
        raise NotImplementedError

    async def _ack(self, entry_id: str, queue: str | None = None) -> None:
        raise NotImplementedError

    async def _requeue(
        self, entry_id: str, fields: redis_types.RedisFields, queue: str | None = None
    ) -> None:
        raise NotImplementedError

    async def _terminal(
        self, job_id: str, event_type: str, payload: dict[str, Any]
    ) -> Any:
        raise NotImplementedError

    async def _error_usage(
        self, job: protocol.Job, streamed: int
    ) -> dict[str, int] | None:
        """Return the ``usage`` of an ``error`` event for ``job`` after ``streamed``
        token events (None when there were none: an error before the first token
        bills nothing, gateway/generations/outcome.py).

        ``prompt_tokens`` comes from the engine's own count of the job's messages (in
        a thread: a remote engine asks its server); 0 if the engine cannot count.
        """
        if not streamed:
            return None
        try:
            prompt = await asyncio.to_thread(self.engine.count_tokens, job.messages)
        except Exception:  # noqa: BLE001 - billing the completion alone beats failing
            logger.warning("job %s: could not count its prompt tokens", job.job_id)
            prompt = 0
        return {
            "prompt_tokens": int(prompt),
            "completion_tokens": streamed,
            "cached_tokens": 0,
        }

    async def _reclaim_loop(self) -> None:
        while not self._closing:
            await asyncio.sleep(self.reclaim_s)
            try:
                await self.reclaim()
            except Exception:  # noqa: BLE001 - retried at the next interval
                logger.exception("crash recovery scan failed")

    async def reclaim(self) -> int:
        """Take over the pending jobs of dead workers of this pool; return how many.

        A consumer is dead when its heartbeat (``inf:workers:{pool}``) is missing or
        older than ``worker_ttl_s`` seconds. Each of its entries is claimed (XCLAIM, so
        one worker wins) and then: already ended → acknowledged; no token yet and
        retries left → re-queued as a new entry; else ended with ``worker_lost``.
        Dead consumers left with no pending entry are removed from the group and the
        heartbeat set. Every queue of the worker (:attr:`queue_keys`) is scanned, and
        the own streams of the pool's dead workers (:mod:`inference.affinity`): their
        jobs are re-queued on the pool's queue.
        """
        now = time.time()
        live = set(
            await self.redis.zrangebyscore(
                keys.workers_key(self.pool), now - self.worker_ttl_s, "+inf"
            )
        )
        live.add(self.worker_id)
        handled = 0
        for queue in self.queue_keys:
            try:
                consumers = await self.redis.xinfo_consumers(queue, protocol.GROUP)
            except ResponseError:
                continue  # no stream or group yet
            for consumer in consumers:
                name = consumer["name"]
                if name in live:
                    continue
                if int(consumer["pending"]):
                    handled += await self._reclaim_consumer(name, queue)
                    still = await self.redis.xpending_range(
                        queue,
                        protocol.GROUP,
                        min="-",
                        max="+",
                        count=1,
                        consumername=name,
                    )
                    if still:
                        continue
                await self.redis.xgroup_delconsumer(queue, protocol.GROUP, name)
                await self.redis.zrem(keys.workers_key(self.pool), name)
        handled += await self._reclaim_own_streams(live)
        self.reclaim_scans += 1
        return handled

    async def _reclaim_own_streams(self, live: set[Any]) -> int:
        """Take over the jobs dead workers had taken from their own streams."""
        handled = 0
        members = await self.redis.smembers(keys.worker_queues_key(self.pool))
        for worker in cast(set[str], members):
            if worker in live:
                continue
            stream = keys.worker_queue_key(self.pool, worker)
            try:
                consumers = await self.redis.xinfo_consumers(stream, protocol.GROUP)
            except ResponseError:
                continue  # no stream or group
            for consumer in consumers:
                if int(consumer["pending"]):
                    handled += await self._reclaim_consumer(consumer["name"], stream)
        return handled

    async def _reclaim_consumer(self, consumer: str, queue: str) -> int:
        entries = await self.redis.xpending_range(
            queue, protocol.GROUP, min="-", max="+", count=100, consumername=consumer
        )
        handled = 0
        for entry in entries:
            entry_id = str(entry["message_id"])
            self._reclaiming.add(entry_id)
            try:
                handled += await self._claim_recover(entry_id, consumer, queue)
            finally:
                self._reclaiming.discard(entry_id)
        return handled

    async def _claim_recover(self, entry_id: str, consumer: str, queue: str) -> int:
        """Claim one entry of a dead ``consumer`` and recover its job; return 1 when
        a job was recovered, 0 when another worker claimed it or it was deleted."""
        # min_idle_time makes the claim conditional: a second reclaimer racing us
        # finds the idle time reset by our claim and gets nothing.
        claimed = await self.redis.xclaim(
            queue,
            protocol.GROUP,
            self.worker_id,
            min_idle_time=500,
            message_ids=[entry_id],
        )
        # an entry deleted meanwhile comes back with no fields
        reply = cast(list[tuple[str, dict[str, str] | None]], claimed)
        handled = 0
        for claimed_id, fields in reply:
            if fields is None:  # deleted meanwhile
                await self._ack(claimed_id, queue)
                continue
            handled += 1
            self.jobs_reclaimed += 1
            await self._recover(claimed_id, fields, consumer, queue)
        return handled

    async def _recover(
        self, entry_id: str, fields: dict[str, Any], dead: str, queue: str
    ) -> None:
        try:
            job = protocol.Job.from_fields(fields)
        except (ValueError, TypeError):
            await self._ack(entry_id, queue)
            return
        if await self.redis.exists(keys.final_key(job.job_id)):
            await self._ack(entry_id, queue)  # it ended; only the ack was lost
            return
        head = cast(
            list[redis_types.StreamEntry],
            await self.redis.xrange(keys.gen_key(job.job_id), count=8),
        )
        emitted = any(f.get("e") == protocol.EVENT_TOKEN for _id, f in head)
        if not emitted:
            attempts = await self.redis.incr(keys.attempts_key(job.job_id))
            await self.redis.expire(keys.attempts_key(job.job_id), self.stream_ttl_s)
            if attempts <= protocol.MAX_RETRIES:
                # A fresh queue window: the first one was spent on the dead worker.
                now = time.time()
                if job.deadline and job.enqueued_at:
                    job.deadline = now + max(1.0, job.deadline - job.enqueued_at)
                logger.warning(
                    "job %s lost worker %s before its first token: retry %s",
                    job.job_id,
                    dead,
                    attempts,
                )
                metrics.REQUESTS_RETRIED.labels(pool=self.pool).inc()
                await self._requeue(entry_id, job.to_fields(), queue)
                return
        logger.warning("job %s lost worker %s mid-answer", job.job_id, dead)
        streamed = 0
        if emitted:
            events = cast(
                list[redis_types.StreamEntry],
                await self.redis.xrange(keys.gen_key(job.job_id)),
            )
            streamed = sum(f.get("e") == protocol.EVENT_TOKEN for _id, f in events)
        await self._terminal(
            job.job_id,
            protocol.EVENT_ERROR,
            {
                "code": protocol.ERROR_WORKER_LOST,
                "message": "The model worker stopped while answering. "
                "The answer is incomplete; please try again.",
                "usage": await self._error_usage(job, streamed),
            },
        )
        await self._ack(entry_id, queue)
