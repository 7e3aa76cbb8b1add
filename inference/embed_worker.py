"""The embedding worker: serves an embedding pool, batching the requests that wait.

Same queue protocol, heartbeats, crash recovery and graceful stop as the generation
:class:`~inference.worker.Worker` (it is one), but a job is ``kind="embed"`` and ends
with one ``embedding`` event instead of a token stream.

Dynamic batching: the worker blocks for the first job, then takes what else is queued;
when more were queued (a burst is arriving) it waits out the rest of the ``gather_ms``
millisecond window once and takes what came meanwhile (stopping early at
``max_batch`` texts), and runs all of them through the engine together. A lone job
(nothing else queued when it is taken) runs at once: no window, since nobody is
arriving with it, and jobs that come while it runs queue in Redis and form the next
batch, as under load, where batches fill without any waiting. Jobs whose caller gave up (deadline passed, or their result key
already set) are dropped before the batch runs.

Two queues, interactive first: ``inf:q:{pool}`` holds what a person waits on (a turn's
question, a fact, a small API request), ``inf:qb:{pool}`` bulk work (document chunks,
large API requests; jobs of a few texts each, :func:`inference.embeddings.embed_texts`).
A batch is interactive jobs only whenever any wait; bulk jobs run, ``bulk_batch`` texts
at a time, only when none does, so a question waits behind at most one small bulk batch,
never behind a whole document (a 300-chunk upload delayed questions by 9-20 s when
both shared one queue).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any, cast

from redis.exceptions import ResponseError

from inference import keys, metrics, protocol, redis_types
from inference.client import terminal_append
from inference.engines.base import EngineError
from inference.engines.embedding import Embedded, EmbeddingEngine
from inference.vectors import vectors_encode
from inference.worker import Worker

logger = logging.getLogger("inference.worker")


@dataclass
class Entry:
    """A delivered queue entry: the stream it came from, its id and its job."""

    queue: str
    entry_id: str
    job: protocol.Job


class EmbeddingDimensionError(ValueError):
    """An embedding model's vectors do not have the dimension of the stored ones."""


class EmbedWorker(Worker):
    """Serve one embedding pool with one :class:`EmbeddingEngine`.

    ``gather_ms`` is the batching window in milliseconds (0: take only what is already
    queued); ``max_batch`` the most texts per interactive batch (default: the
    engine's); ``bulk_batch`` the most texts per bulk batch;
    ``expected_dim`` the dimension of the stored vectors: a model of another dimension
    makes :meth:`run` raise :class:`EmbeddingDimensionError` before serving anything.
    Other options are those of :class:`~inference.worker.Worker`.
    """

    kind = "embedding"

    def __init__(
        self,
        *,
        pool: str,
        engine: EmbeddingEngine,
        redis_url: str,
        gather_ms: float = 2.0,
        max_batch: int | None = None,
        bulk_batch: int = 16,
        expected_dim: int | None = None,
        stream_ttl_s: int = 120,
        **options: Any,
    ) -> None:
        options.pop("concurrency", None)
        super().__init__(
            pool=pool,
            engine=engine,  # type: ignore[arg-type]  # the Worker only starts, aborts, closes it
            redis_url=redis_url,
            concurrency=1,
            stream_ttl_s=stream_ttl_s,
            **options,
        )
        self.embedder = engine
        self.gather_ms = max(0.0, gather_ms)
        self.max_batch = max(1, max_batch or engine.max_batch)
        self.bulk_batch = max(1, bulk_batch)
        self.expected_dim = expected_dim
        self._queue = keys.queue_key(pool)
        self._bulk_queue = keys.background_queue_key(pool)
        # bulk entries delivered to us while interactive ones went first
        self._held: list[Entry] = []
        # entry id -> its job already ended (final key set), asked with the read that
        # found a job lone (:meth:`_gather`), for :meth:`_run_batch`
        self._ended: dict[str, bool] = {}
        self._batch_jobs = 0
        self.batches = 0  # batches run (tests and benchmarks read it)

    async def _engine_ready(self) -> None:
        dim = self.embedder.dim
        if self.expected_dim is not None and dim != self.expected_dim:
            raise EmbeddingDimensionError(
                f"pool {self.pool!r}: model {self.embedder.model!r} makes {dim}-d "
                f"vectors, but the stored vectors are {self.expected_dim}-d. Serve a "
                f"{self.expected_dim}-d model on this pool, or migrate the vector "
                "columns and re-embed the stored facts, chunks and cache entries."
            )

    def _busy(self) -> int:
        return self._batch_jobs

    def _heartbeat_fields(self) -> redis_types.RedisFields:
        return {"dim": self.embedder.dim, "max_batch": self.max_batch}

    async def _read(
        self,
        queues: list[str],
        *,
        count: int,
        block_ms: int | None,
        check: list[Entry] | None = None,
    ) -> list[Entry]:
        """Read up to ``count`` new entries of each of ``queues`` (waiting up to
        ``block_ms``; None: no wait), in the order of ``queues``. ``check``: entries
        taken before whose jobs' final keys are asked in the same round trip (the
        answers go to ``_ended``; a non-blocking read only).

        A queue whose consumer group vanished (Redis restarted without persistence, or
        the stream was deleted while we waited on it) gets it back instead of ending
        the worker.
        """
        streams: redis_types.StreamOffsets = {queue: ">" for queue in queues}
        try:
            if check:
                async with self.redis.pipeline(transaction=False) as pipe:
                    pipe.xreadgroup(
                        protocol.GROUP, self.worker_id, streams, count=count
                    )
                    for entry in check:
                        pipe.exists(keys.final_key(entry.job.job_id))
                    found, *ended = await pipe.execute()
                result = cast(redis_types.StreamRead, found)
                self._ended = {
                    e.entry_id: bool(gone) for e, gone in zip(check, ended, strict=True)
                }
            else:
                result = cast(
                    redis_types.StreamRead,
                    await self.redis.xreadgroup(
                        protocol.GROUP,
                        self.worker_id,
                        streams,
                        count=count,
                        block=block_ms,
                    ),
                )
        except ResponseError as exc:
            if "NOGROUP" not in str(exc) and "UNBLOCKED" not in str(exc):
                raise
            await self._ensure_group()
            return []
        by_queue = {key: entries for key, entries in result or []}
        entries = []
        for queue in queues:
            for entry_id, fields in by_queue.get(queue, []):
                try:
                    job = protocol.Job.from_fields(fields)
                except (ValueError, TypeError) as exc:
                    logger.error("dropping malformed queue entry %s: %s", entry_id, exc)
                    await self._ack(entry_id, queue)
                    continue
                entries.append(Entry(queue, entry_id, job))
        return entries

    async def _take_loop(self) -> None:
        while not self._stopping.is_set():
            batch = await self._next_batch()
            if self._stopping.is_set():
                for entry in batch + self._held:
                    await self._requeue(
                        entry.entry_id, entry.job.to_fields(), entry.queue
                    )
                self._held = []
                return
            if batch:
                await self._run_batch(batch)

    async def _next_batch(self) -> list[Entry]:
        """Return the next batch: interactive jobs if any wait, else bulk ones."""
        batch = await self._read([self._queue], count=self.max_batch, block_ms=None)
        if not batch and not self._held:
            # Nothing queued: wait for the first job of either queue.
            first = await self._read(
                [self._queue, self._bulk_queue], count=1, block_ms=self.block_ms
            )
            batch = [e for e in first if e.queue == self._queue]
            self._held += [e for e in first if e.queue == self._bulk_queue]
        if batch:
            return await self._gather(batch)
        batch, self._held = self._held, []
        texts = sum(len(e.job.input) for e in batch)
        while texts < self.bulk_batch and not self._stopping.is_set():
            more = await self._read([self._bulk_queue], count=1, block_ms=None)
            if not more:
                break
            batch += more
            texts += sum(len(e.job.input) for e in more)
        return batch

    async def _gather(self, batch: list[Entry]) -> list[Entry]:
        """Add the interactive jobs that arrive within the gathering window; a lone
        job (the only one, nothing more queued) is returned at once."""
        texts = sum(len(e.job.input) for e in batch)
        gather_until = time.monotonic() + self.gather_ms / 1000
        lone = len(batch) == 1
        self._ended = {}
        while texts < self.max_batch and not self._stopping.is_set():
            # Take what is queued without blocking (block=None; BLOCK 0 would wait
            # forever). The window is waited out here, not with XREADGROUP BLOCK:
            # Redis ends a blocked read only on its server tick (1000/hz ms, 100 ms
            # at the default hz 10), so BLOCK 2 would make a lone request wait ~100 ms.
            # A lone job's final key is asked with this read (it runs right after).
            more = await self._read(
                [self._queue],
                count=max(1, self.max_batch - len(batch)),
                block_ms=None,
                check=batch if lone else None,
            )
            if not more:
                left_s = gather_until - time.monotonic()
                if left_s <= 0 or lone:
                    break
                await asyncio.sleep(left_s)
                continue
            lone = False
            self._ended = {}  # asked too early for a batch that waits out the window
            batch += more
            texts += sum(len(e.job.input) for e in more)
        return batch

    async def _fail(self, job: protocol.Job, code: str, message: str) -> None:
        await self._terminal(
            job.job_id,
            protocol.EVENT_ERROR,
            {"code": code, "message": message, "usage": None},
        )

    async def _run_batch(self, entries: list[Entry]) -> None:
        started = time.time()
        known, self._ended = self._ended, {}
        ask = [entry for entry in entries if entry.entry_id not in known]
        if ask:
            async with self.redis.pipeline(transaction=False) as pipe:
                for entry in ask:
                    pipe.exists(keys.final_key(entry.job.job_id))
                known.update(
                    (e.entry_id, bool(gone))
                    for e, gone in zip(ask, await pipe.execute(), strict=True)
                )
        ended = [known[entry.entry_id] for entry in entries]
        live: list[Entry] = []
        for entry, gone in zip(entries, ended, strict=True):
            job = entry.job
            if gone:  # the caller gave up (timeout) or another worker answered
                await self._ack(entry.entry_id, entry.queue)
            elif job.kind != protocol.KIND_EMBED:
                await self._fail(
                    job,
                    protocol.ERROR_ENGINE,
                    f"Pool {self.pool!r} serves embeddings, not chat generations.",
                )
                await self._ack(entry.entry_id, entry.queue)
            elif job.deadline and started > job.deadline:
                await self._fail(
                    job,
                    protocol.ERROR_QUEUE_TIMEOUT,
                    "The embedding request waited too long in the queue.",
                )
                await self._ack(entry.entry_id, entry.queue)
            else:
                live.append(entry)
        if not live:
            return
        self._batch_jobs = len(live)
        labels = self._labels
        metrics.REQUESTS_RUNNING.labels(**labels).inc(len(live))
        try:
            results: list[Embedded | EngineError] = await self.embedder.embed(
                [entry.job.input for entry in live]
            )
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - the batch's jobs end with an event
            logger.exception("embedding batch of %s jobs failed", len(live))
            results = [
                exc if isinstance(exc, EngineError) else EngineError(str(exc))
            ] * len(live)
        finally:
            metrics.REQUESTS_RUNNING.labels(**labels).dec(len(live))
            self._batch_jobs = 0
        end = time.time()
        self.batches += 1
        metrics.EMBEDDING_BATCH_TEXTS.labels(**labels).observe(
            sum(len(entry.job.input) for entry in live)
        )
        answers = [
            self._answer(entry.job, result, started=started, end=end)
            for entry, result in zip(live, results, strict=True)
        ]
        # One round trip for the whole batch: every job's terminal event, then the acks
        # (per-job round trips cost more than the forward pass: docs/benchmarks.md).
        done: dict[str, list[str]] = {}
        for entry in live:
            done.setdefault(entry.queue, []).append(entry.entry_id)
        async with self.redis.pipeline(transaction=False) as pipe:
            for entry, (event_type, payload) in zip(live, answers, strict=True):
                terminal_append(
                    pipe,
                    job_id=entry.job.job_id,
                    event_type=event_type,
                    payload=payload,
                    ttl_s=self.stream_ttl_s,
                )
            for queue, entry_ids in done.items():
                pipe.xack(queue, protocol.GROUP, *entry_ids)
                pipe.xdel(queue, *entry_ids)
            await pipe.execute()
        self.jobs_done += len(live)
        for event_type, payload in answers:
            if event_type == protocol.EVENT_ERROR:
                metrics.REQUEST_ERRORS.labels(**labels, code=payload["code"]).inc()

    def _answer(
        self,
        job: protocol.Job,
        result: Embedded | EngineError,
        *,
        started: float,
        end: float,
    ) -> tuple[str, dict[str, Any]]:
        """Return the terminal event (type, payload) of one job of a batch."""
        labels = self._labels
        origin = job.enqueued_at or started
        count = len(job.input)
        if isinstance(result, EngineError):
            return self._error(
                result.code, "The embedding model failed; please try again."
            )
        vectors = result.vectors
        if len(vectors) != count:
            return self._error(
                protocol.ERROR_ENGINE,
                f"The embedding model returned {len(vectors)} vectors for {count} texts.",
            )
        queue_s = max(0.0, started - origin)
        metrics.QUEUE_TIME.labels(**labels).observe(queue_s)
        metrics.E2E_LATENCY.labels(**labels).observe(max(0.0, end - origin))
        metrics.PROMPT_TOKENS.labels(**labels).inc(result.tokens)
        metrics.REQUEST_SUCCESS.labels(**labels, finished_reason="embedding").inc()
        return (
            protocol.EVENT_EMBEDDING,
            {
                "model": self.embedder.model,
                "worker": self.worker_id,
                "dim": self.embedder.dim,
                "count": count,
                "vectors": vectors_encode(vectors) if count else "",
                "usage": {
                    "prompt_tokens": result.tokens,
                    "completion_tokens": 0,
                    "cached_tokens": 0,
                },
                "queue_ms": int(queue_s * 1000),
                "latency_ms": int((end - origin) * 1000),
            },
        )

    @staticmethod
    def _error(code: str, message: str) -> tuple[str, dict[str, Any]]:
        return protocol.EVENT_ERROR, {"code": code, "message": message, "usage": None}
