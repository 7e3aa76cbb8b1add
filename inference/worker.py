"""The inference worker: pulls jobs of one pool from Redis and runs them on an engine.

One asyncio loop per process. The worker reads its pool's queue stream through the
``workers`` consumer group, and only when a slot is free (``engine.max_concurrency``
slots), so backlog stays in Redis where the gateway can see it. Each job's deltas are
appended to its own ``inf:gen:{job_id}`` stream; the terminal event carries exact usage.
A cancel watcher polls the cancel flags and detach deadlines of running jobs every
``cancel_poll_s`` seconds and aborts them in the engine.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
import uuid
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from inference import protocol
from inference.client import terminal_append
from inference.engines.base import Delta, Engine, EngineError, Finish

logger = logging.getLogger(__name__)


class Worker:
    """Serve one pool with one engine until :meth:`stop` is called.

    ``heartbeat_s`` and ``cancel_poll_s`` are seconds; ``block_ms`` is how long one
    XREADGROUP waits for new jobs, in milliseconds.
    """

    def __init__(
        self,
        *,
        pool: str,
        engine: Engine,
        redis_url: str,
        concurrency: int | None = None,
        worker_id: str | None = None,
        stream_ttl_s: int = 3600,
        heartbeat_s: float = 2.0,
        cancel_poll_s: float = 0.05,
        block_ms: int = 500,
    ) -> None:
        self.pool = pool
        self.engine = engine
        self.redis_url = redis_url
        self.concurrency = max(1, concurrency or engine.max_concurrency)
        self.worker_id = (
            worker_id or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        )
        self.stream_ttl_s = stream_ttl_s
        self.heartbeat_s = heartbeat_s
        self.cancel_poll_s = cancel_poll_s
        self.block_ms = block_ms
        self._running: dict[str, asyncio.Task[None]] = {}
        self._aborted: set[str] = set()
        self._stopping = asyncio.Event()
        self._redis: aioredis.Redis | None = None
        self.jobs_done = 0

    @property
    def redis(self) -> aioredis.Redis:
        assert self._redis is not None, "worker not started"
        return self._redis

    def stop(self, *, abort_running: bool = False) -> None:
        """Ask the worker to take no new job and exit once its running jobs end.

        With ``abort_running`` the running jobs are also cancelled (partial answers end
        with ``finish_reason="cancelled"``), so the worker exits within a decode step.
        Call from the worker's event loop (e.g. via ``loop.call_soon_threadsafe``).
        """
        self._stopping.set()
        if abort_running:
            for job_id in list(self._running):
                self._aborted.add(job_id)
                self.engine.abort(job_id)

    async def run(self) -> None:
        """Serve until :meth:`stop`; running jobs finish before this returns."""
        self._redis = aioredis.Redis.from_url(self.redis_url, decode_responses=True)
        await self._ensure_group()
        await self.engine.start()
        aux = [
            asyncio.create_task(self._heartbeat_loop()),
            asyncio.create_task(self._cancel_loop()),
        ]
        logger.info(
            "worker %s serving pool %r with %s (%s slots)",
            self.worker_id,
            self.pool,
            self.engine.name,
            self.concurrency,
        )
        try:
            await self._take_loop()
            if self._running:
                await asyncio.gather(*self._running.values(), return_exceptions=True)
        finally:
            for task in aux:
                task.cancel()
            await asyncio.gather(*aux, return_exceptions=True)
            await self.redis.zrem(protocol.workers_key(self.pool), self.worker_id)
            await self.redis.delete(protocol.worker_key(self.worker_id))
            await self.engine.close()
            await self.redis.aclose()

    async def _ensure_group(self) -> None:
        try:
            await self.redis.xgroup_create(
                protocol.queue_key(self.pool), protocol.GROUP, id="0", mkstream=True
            )
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    async def _take_loop(self) -> None:
        slot_freed = asyncio.Event()
        while not self._stopping.is_set():
            free = self.concurrency - len(self._running)
            if free <= 0:
                slot_freed.clear()
                stop_wait = asyncio.create_task(self._stopping.wait())
                freed_wait = asyncio.create_task(slot_freed.wait())
                await asyncio.wait(
                    {stop_wait, freed_wait}, return_when=asyncio.FIRST_COMPLETED
                )
                stop_wait.cancel()
                freed_wait.cancel()
                continue
            result = await self.redis.xreadgroup(
                protocol.GROUP,
                self.worker_id,
                {protocol.queue_key(self.pool): ">"},
                count=free,
                block=self.block_ms,
            )
            for _key, entries in result or []:
                for entry_id, fields in entries:
                    self._start_job(entry_id, fields, slot_freed)

    def _start_job(
        self, entry_id: str, fields: dict[str, Any], slot_freed: asyncio.Event
    ) -> None:
        try:
            job = protocol.Job.from_fields(fields)
        except (ValueError, TypeError) as exc:
            logger.error("dropping malformed queue entry %s: %s", entry_id, exc)
            asyncio.create_task(self._ack(entry_id))
            return
        task = asyncio.create_task(self._run_job(entry_id, job))
        self._running[job.job_id] = task

        def _done(_t: asyncio.Task[None], job_id: str = job.job_id) -> None:
            self._running.pop(job_id, None)
            self._aborted.discard(job_id)
            slot_freed.set()

        task.add_done_callback(_done)

    async def _ack(self, entry_id: str) -> None:
        await self.redis.xack(protocol.queue_key(self.pool), protocol.GROUP, entry_id)

    async def _terminal(
        self, job_id: str, event_type: str, payload: dict[str, Any]
    ) -> bool:
        written = await terminal_append(
            self.redis,
            job_id=job_id,
            event_type=event_type,
            payload=payload,
            ttl_s=self.stream_ttl_s,
        )
        return bool(written)

    async def _run_job(self, entry_id: str, job: protocol.Job) -> None:
        started = time.time()
        gen = protocol.gen_key(job.job_id)
        try:
            if job.deadline and started > job.deadline:
                await self._terminal(
                    job.job_id,
                    protocol.EVENT_ERROR,
                    {
                        "code": protocol.ERROR_QUEUE_TIMEOUT,
                        "message": "The request waited too long in the queue. Please try again.",
                        "usage": None,
                    },
                )
                return
            if await self.redis.exists(protocol.final_key(job.job_id)):
                return  # ended elsewhere (e.g. timed out by the web tier)
            queue_ms = (
                int(max(0.0, started - job.enqueued_at) * 1000)
                if job.enqueued_at
                else 0
            )
            meta = protocol.event_fields(
                protocol.EVENT_META,
                {
                    "model": self.engine.model,
                    "worker": self.worker_id,
                    "queue_ms": queue_ms,
                },
            )
            async with self.redis.pipeline(transaction=False) as pipe:
                pipe.xadd(gen, meta)
                pipe.expire(gen, self.stream_ttl_s * 24)
                await pipe.execute()
            if job.job_id in self._aborted or await self.redis.exists(
                protocol.cancel_key(job.job_id)
            ):
                self.engine.abort(job.job_id)
            await self._stream(job, gen)
        except asyncio.CancelledError:
            self.engine.abort(job.job_id)
            raise
        except Exception as exc:  # noqa: BLE001 - any engine failure ends the job with an event
            code = exc.code if isinstance(exc, EngineError) else protocol.ERROR_ENGINE
            logger.exception("job %s failed", job.job_id)
            await self._terminal(
                job.job_id,
                protocol.EVENT_ERROR,
                {
                    "code": code,
                    "message": "The model failed while answering. Please try again.",
                    "usage": None,
                },
            )
        finally:
            await self._ack(entry_id)
            self.jobs_done += 1

    async def _stream(self, job: protocol.Job, gen: str) -> None:
        first_token_at: float | None = None
        async for item in self.engine.generate(job):
            if isinstance(item, Delta):
                if first_token_at is None:
                    first_token_at = time.time()
                await self.redis.xadd(gen, protocol.token_fields(item.text))
            elif isinstance(item, Finish):
                end = time.time()
                origin = job.enqueued_at or end
                await self._terminal(
                    job.job_id,
                    protocol.EVENT_DONE,
                    {
                        "finish_reason": item.finish_reason,
                        "usage": {
                            "prompt_tokens": item.usage.prompt_tokens,
                            "completion_tokens": item.usage.completion_tokens,
                            "cached_tokens": item.usage.cached_tokens,
                        },
                        "ttft_ms": int((first_token_at - origin) * 1000)
                        if first_token_at
                        else None,
                        "latency_ms": int((end - origin) * 1000),
                    },
                )

    async def _heartbeat_loop(self) -> None:
        while True:
            now = time.time()
            async with self.redis.pipeline(transaction=False) as pipe:
                pipe.zadd(protocol.workers_key(self.pool), {self.worker_id: now})
                pipe.hset(
                    protocol.worker_key(self.worker_id),
                    mapping={
                        "slots": self.concurrency,
                        "busy": len(self._running),
                        "pool": self.pool,
                    },
                )
                pipe.expire(protocol.worker_key(self.worker_id), 30)
                await pipe.execute()
            await asyncio.sleep(self.heartbeat_s)

    async def _cancel_loop(self) -> None:
        while True:
            await asyncio.sleep(self.cancel_poll_s)
            job_ids = [j for j in self._running if j not in self._aborted]
            if not job_ids:
                continue
            async with self.redis.pipeline(transaction=False) as pipe:
                for job_id in job_ids:
                    pipe.exists(protocol.cancel_key(job_id))
                    pipe.get(protocol.detached_key(job_id))
                flags = await pipe.execute()
            now = time.time()
            for i, job_id in enumerate(job_ids):
                cancelled, detached_until = flags[2 * i], flags[2 * i + 1]
                if cancelled or (
                    detached_until is not None and float(detached_until) <= now
                ):
                    self._aborted.add(job_id)
                    self.engine.abort(job_id)
