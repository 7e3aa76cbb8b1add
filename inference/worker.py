"""The inference worker: pulls jobs of one pool from Redis and runs them on an engine.

One asyncio loop per process. The worker reads its pool's queue streams through the
``workers`` consumer group, and only when a slot is free (``engine.max_concurrency``
slots), so backlog stays in Redis where the gateway can see it; background work
(titles, summaries, facts) yields to what a person waits on (inference/intake.py). Each job's deltas are
appended to its own ``inf:gen:{job_id}`` stream; the terminal event carries exact usage.
A cancel watcher polls the cancel flags and detach deadlines of running jobs every
``cancel_poll_s`` seconds and aborts them in the engine.

Base classes of :class:`Worker`: :class:`inference.intake.JobIntake` (the two lanes
and preemption), :class:`inference.recovery.CrashRecovery` (taking over
a dead worker's jobs), :class:`inference.outage.RedisOutageTolerance` (Redis restarts),
:class:`inference.affinity_sweep.AffinitySweep` (conversation affinity),
:class:`inference.worker_loops.WorkerLoops` (the heartbeat and the cancel poll),
:class:`inference.engine_relay.EngineRelay` (a started job's output, from the engine
to its stream, and its end). What stays here is the worker's start and stop and one
job's run: started (its ``meta`` event), relayed, failed, acknowledged.

Graceful stop (SIGTERM): :meth:`Worker.stop` makes the worker take no new job (entries
that arrive during the last blocking read are put back on the queue untouched), finish
its running jobs, and return from :meth:`Worker.run`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from inference import keys, metrics, protocol, redis_types
from inference.affinity_sweep import AffinitySweep
from inference.client import terminal_append
from inference.connections import redis_async_new
from inference.engine_relay import EngineRelay
from inference.engines.base import Engine, EngineError
from inference.intake import JobIntake
from inference.liveness import WORKER_TTL_S
from inference.outage import RedisOutageTolerance
from inference.recovery import CrashRecovery
from inference.stream_writer import StreamWriter
from inference.worker_loops import WorkerLoops

logger = logging.getLogger(__name__)


# Start a job: KEYS = final marker, cancel flag, generation stream (one slot: the
# job's); ARGV = meta event type and payload, stream TTL (s). Returns {-1, ''} (the
# generation already ended: nothing written), else {1 if it is cancelled or 0, the meta
# event's entry id} after appending the meta event (the id opens the stream journal).
_START_LUA = """
if redis.call('EXISTS', KEYS[1]) == 1 then return {-1, ''} end
local cancelled = redis.call('EXISTS', KEYS[2])
local id = redis.call('XADD', KEYS[3], '*', 'e', ARGV[1], 'd', ARGV[2])
redis.call('EXPIRE', KEYS[3], ARGV[3])
return {cancelled, id}
"""


class Worker(
    JobIntake,
    CrashRecovery,
    AffinitySweep,
    RedisOutageTolerance,
    WorkerLoops,
    EngineRelay,
):
    """Serve one pool with one engine until :meth:`stop` is called.

    ``heartbeat_s``, ``cancel_poll_s``, ``worker_ttl_s`` (a heartbeat older than this
    means the worker is dead) and ``reclaim_s`` (crash-recovery scan interval) are
    seconds; ``block_ms`` is how long one XREADGROUP waits for new jobs, in milliseconds.
    Raises ``ValueError`` when ``worker_ttl_s`` is under twice ``heartbeat_s``.
    Conversation affinity (:mod:`inference.affinity`): ``affinity_wait_s`` (s) is the
    longest a job waits in a worker's own stream before the sweep (every
    ``affinity_sweep_s`` s) moves it to the pool's queue; ``affinity_ttl_s`` (s) how
    long a conversation remembers this worker after a turn (0: never recorded).
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
        worker_ttl_s: float = WORKER_TTL_S,
        reclaim_s: float = 5.0,
        affinity_wait_s: float = 2.0,
        affinity_sweep_s: float = 0.25,
        affinity_ttl_s: int = 1800,
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
        if worker_ttl_s < 2 * heartbeat_s:
            raise ValueError(
                f"worker_ttl_s ({worker_ttl_s}) must be at least twice heartbeat_s "
                f"({heartbeat_s}), or live workers would look dead"
            )
        self.worker_ttl_s = worker_ttl_s
        self.reclaim_s = reclaim_s
        self.affinity_wait_s = affinity_wait_s
        self.affinity_sweep_s = affinity_sweep_s
        self.affinity_ttl_s = affinity_ttl_s
        self._labels = {"model_name": engine.model, "pool": pool}
        self._running: dict[str, asyncio.Task[None]] = {}
        self._aborted: set[str] = set()
        self._background: set[str] = set()
        self._preempted: set[str] = set()
        self._freed: set[str] = set()  # jobs whose slot and affinity are published
        self._journals = {}  # typed in RedisOutageTolerance
        self._stream_writer = StreamWriter(self._publish_batches)
        self._pending_check = True  # our own pending entries: read them at start
        self._reclaiming: set[str] = set()  # entry ids crash recovery is handling
        self._stopping = asyncio.Event()
        self._closing = False
        self._redis: aioredis.Redis | None = None
        self.jobs_done = 0
        self.jobs_reclaimed = 0
        self.reclaim_scans = 0  # completed crash-recovery scans

    kind = "chat"

    @property
    def queue_keys(self) -> list[str]:
        """The queue streams this worker takes jobs from, in order of priority: a chat
        worker's own stream first (:mod:`inference.affinity`)."""
        own = [self.own_queue] if self.kind == "chat" else []
        return [
            *own,
            keys.queue_key(self.pool),
            keys.background_queue_key(self.pool),
        ]

    def _busy(self) -> int:
        """Job slots in use (published in the heartbeat): a job whose engine finished
        frees its slot before its terminal event is written."""
        return len(self._running.keys() - self._freed)

    async def _engine_ready(self) -> None:  # noqa: B027 - optional hook
        """Check the started engine before serving (raise to refuse to start)."""

    def _heartbeat_fields(self) -> redis_types.RedisFields:
        """What this kind of worker adds to its heartbeat hash (none for chat)."""
        return {}

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

    async def run(self, *, started: Callable[[], None] | None = None) -> None:
        """Serve until :meth:`stop`; running jobs finish before this returns.

        ``started`` is called once the engine is ready, before the first heartbeat
        (no job is taken before it returns): the process's start-up is over there.
        """
        self._redis = redis_async_new(self.redis_url)
        await self._ensure_group()
        await self.engine.start()
        await self._engine_ready()
        if started is not None:
            started()
        # Beat once before the first read, so no other worker ever sees our entries
        # owned by a consumer without a heartbeat.
        await self._heartbeat()
        aux = [
            asyncio.create_task(self._heartbeat_loop()),
            asyncio.create_task(self._cancel_loop()),
            asyncio.create_task(self._reclaim_loop()),
        ]
        if self.kind == "chat":
            aux.append(asyncio.create_task(self._affinity_sweep_loop()))
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
            # The loops also check _closing: redis-py can absorb a CancelledError that
            # lands inside a command, and a loop must not outlive the worker.
            self._closing = True
            for task in aux:
                task.cancel()
            await asyncio.wait(aux, timeout=5)
            await self._stream_writer.aclose()
            await self.redis.zrem(keys.workers_key(self.pool), self.worker_id)
            await self.redis.delete(keys.worker_key(self.worker_id))
            await self.engine.close()
            await self.redis.aclose()

    async def _ensure_group(self) -> None:
        for queue in self.queue_keys:
            try:
                await self.redis.xgroup_create(
                    queue, protocol.GROUP, id="0", mkstream=True
                )
            except ResponseError as exc:
                if "BUSYGROUP" not in str(exc):
                    raise

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
        if written and event_type == protocol.EVENT_ERROR:
            metrics.REQUEST_ERRORS.labels(**self._labels, code=payload["code"]).inc()
        return bool(written)

    async def _run_job(self, entry_id: str, job: protocol.Job, queue: str) -> None:
        started = time.time()
        gen = keys.gen_key(job.job_id)
        try:
            if job.deadline and started > job.deadline:
                await self._terminal(
                    job.job_id,
                    protocol.EVENT_ERROR,
                    {
                        "code": protocol.ERROR_QUEUE_TIMEOUT,
                        "message": "The model is busy: this request waited too long in the "
                        "queue. Please try again in a moment.",
                        "usage": None,
                    },
                )
                return
            queue_s = max(0.0, started - job.enqueued_at) if job.enqueued_at else 0.0
            metrics.QUEUE_TIME.labels(**self._labels).observe(queue_s)
            meta = protocol.event_fields(
                protocol.EVENT_META,
                {
                    "model": self.engine.model,
                    "worker": self.worker_id,
                    "queue_ms": int(queue_s * 1000),
                },
            )
            # The engine starts beside the one round trip that starts the job (the
            # checks and the meta event in one script, the worker's busy slots beside
            # it: the worker's hash is in another slot), so the request and its
            # prefill overlap it; the engine's first output waits for the meta event
            # (``opened``), so a stream always begins with it.
            opened: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            early = asyncio.create_task(self._stream(job, opened))
            try:
                async with self.redis.pipeline(transaction=False) as pipe:
                    keys.eval_on(
                        pipe,
                        _START_LUA,
                        3,
                        keys.final_key(job.job_id),
                        keys.cancel_key(job.job_id),
                        gen,
                        meta["e"],
                        meta["d"],
                        self.stream_ttl_s * 24,
                    )
                    pipe.hset(
                        keys.worker_key(self.worker_id),
                        mapping={
                            "busy": self._busy(),
                            "preemptible": len(self._preemptible()),
                        },
                    )
                    state, meta_id = (await pipe.execute())[0]
            except BaseException:
                await _task_stop(early)
                raise
            if int(state) < 0:
                await _task_stop(early)
                return  # ended elsewhere (e.g. timed out by the web tier)
            self._journal_open(job.job_id, (meta_id, meta))
            running = metrics.REQUESTS_RUNNING.labels(**self._labels)
            running.inc()
            try:
                if job.job_id in self._aborted or int(state) == 1:
                    # cancelled before it started: the early engine run is dropped
                    # unwritten and the job runs aborted (it ends cancelled, no token)
                    await _task_stop(early)
                    self.engine.abort(job.job_id)
                    await self._stream(job)
                else:
                    opened.set_result(None)
                    await early
            finally:
                running.dec()
        except asyncio.CancelledError:
            self.engine.abort(job.job_id)
            raise
        except Exception as exc:  # noqa: BLE001 - any engine failure ends the job with an event
            # An EngineError with its own code (e.g. context_overflow) carries a message
            # written for the user; anything else gets a generic one.
            user_message = (
                str(exc)
                if isinstance(exc, EngineError) and exc.code != protocol.ERROR_ENGINE
                else "The model failed while answering. Please try again."
            )
            code = exc.code if isinstance(exc, EngineError) else protocol.ERROR_ENGINE
            if code == protocol.ERROR_ENGINE:
                logger.exception("job %s failed", job.job_id)
            else:
                # an outcome of the job's input (a prompt over the context, a
                # parameter the engine cannot honour), not a fault: no traceback
                logger.info(
                    "job %s refused by the engine: %s (%s)", job.job_id, exc, code
                )
            # after a token the answer is billed as far as it went (settle.py)
            streamed = self._journal_tokens(job.job_id)
            await self._stream_ensure(job.job_id)
            await self._terminal(
                job.job_id,
                protocol.EVENT_ERROR,
                {
                    "code": code,
                    "message": user_message,
                    "usage": await self._error_usage(job, streamed),
                },
            )
        finally:
            self._journal_close(job.job_id)
            await self._ack(entry_id, queue)
            self.jobs_done += 1
            if self.kind == "chat" and job.job_id not in self._freed:
                self._freed.add(job.job_id)
                with contextlib.suppress(Exception):
                    await self._affinity_after(
                        job, self._busy(), len(self._preemptible())
                    )


async def _task_stop(task: asyncio.Task[None]) -> None:
    """Cancel ``task`` and wait until it ended (what it raised is dropped)."""
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
