"""The worker's two background loops: its heartbeat and the cancel poll.

A base class of :class:`~inference.worker.Worker` (like
:class:`~inference.recovery.CrashRecovery` and :class:`~inference.outage.RedisOutageTolerance`),
so the worker module stays the job's path from queue to stream.

- the heartbeat (every ``heartbeat_s`` seconds): the worker's score in its pool's
  liveness set, its hash (slots, busy, engine, model, ...) and the pool's waiting-jobs
  gauge;
- the cancel poll (every ``cancel_poll_s`` seconds): one MGET of every running job's
  cancel flag and detach deadline; a cancelled job, or one whose last client left
  longer than its grace period ago, is aborted in the engine.
"""

from __future__ import annotations

import asyncio
import logging
import time

import redis.asyncio as aioredis

from inference import keys, metrics, protocol, redis_types
from inference.engines.base import Engine

logger = logging.getLogger(__name__)


class WorkerLoops:
    """Heartbeat and cancel-poll loops; the subclass provides the attributes used."""

    engine: Engine
    worker_id: str
    pool: str
    kind: str
    concurrency: int
    heartbeat_s: float
    cancel_poll_s: float
    worker_ttl_s: float
    reclaim_scans: int
    _running: dict[str, asyncio.Task[None]]
    _aborted: set[str]
    _stopping: asyncio.Event
    _closing: bool

    @property
    def redis(self) -> aioredis.Redis:  # pragma: no cover - the Worker's
        raise NotImplementedError

    def _busy(self) -> int:  # pragma: no cover - the Worker's
        raise NotImplementedError

    def _preemptible(self) -> list[str]:  # pragma: no cover - the intake's
        raise NotImplementedError

    def _heartbeat_fields(
        self,
    ) -> redis_types.RedisFields:  # pragma: no cover - the Worker's
        raise NotImplementedError

    async def _heartbeat(self) -> None:
        now = time.time()
        queue = keys.queue_key(self.pool)
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.zadd(keys.workers_key(self.pool), {self.worker_id: now})
            pipe.hset(
                keys.worker_key(self.worker_id),
                mapping={
                    "slots": self.concurrency,
                    "busy": self._busy(),
                    "preemptible": len(self._preemptible()),
                    "pool": self.pool,
                    "kind": self.kind,
                    "engine": self.engine.name,
                    "model": self.engine.model,
                    "heartbeat": f"{now:.3f}",
                    "stopping": int(self._stopping.is_set()),
                    "reclaim_scans": self.reclaim_scans,
                    **self._heartbeat_fields(),
                },
            )
            pipe.expire(keys.worker_key(self.worker_id), int(self.worker_ttl_s * 3) + 1)
            pipe.xlen(queue)
            pipe.xpending(queue, protocol.GROUP)
            results = await pipe.execute()
        waiting = max(0, int(results[-2]) - int(results[-1]["pending"]))
        metrics.REQUESTS_WAITING.labels(pool=self.pool).set(waiting)

    async def _heartbeat_loop(self) -> None:
        while not self._closing:
            await asyncio.sleep(self.heartbeat_s)
            try:
                await self._heartbeat()
            except Exception:  # noqa: BLE001 - a Redis blip must not end the heartbeats
                logger.exception("heartbeat failed")

    async def _cancel_loop(self) -> None:
        while not self._closing:
            await asyncio.sleep(self.cancel_poll_s)
            job_ids = [j for j in self._running if j not in self._aborted]
            if not job_ids:
                continue
            try:
                # one MGET for all running jobs (split per slot on a cluster; a pipeline of 2 per job packed and
                # parsed 100 commands every cancel_poll_s at 50 running jobs)
                flags = await keys.mget_all(
                    self.redis,
                    [
                        key
                        for job_id in job_ids
                        for key in (
                            keys.cancel_key(job_id),
                            keys.detached_key(job_id),
                        )
                    ],
                )
            except Exception:  # noqa: BLE001 - a Redis blip must not end the cancels
                logger.exception("cancel check failed")
                continue
            now = time.time()
            for i, job_id in enumerate(job_ids):
                cancelled, detached_until = flags[2 * i], flags[2 * i + 1]
                if cancelled or (
                    detached_until is not None and float(detached_until) <= now
                ):
                    self._aborted.add(job_id)
                    self.engine.abort(job_id)
