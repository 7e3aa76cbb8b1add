"""Embeddings from the inference tier: what the rest of the product calls to get vectors.

The web tier runs no model (DESIGN §2, §3): retrieval, user facts, the semantic cache,
document ingestion and the input-moderation classifier get their vectors by enqueuing an
``embed`` job on the embedding pool (``EMBEDDING_POOL``, default ``embed``) and waiting
for its ``embedding`` event (:mod:`inference.protocol`). Embedding workers
(``run_inference_worker --engine sentence-transformers``) batch the jobs that wait
together, so many concurrent turns share one forward pass.

Vectors are lists of ``EMBEDDING_DIM`` (384) floats of unit length (all-MiniLM-L6-v2 by
default), so cosine similarity is the dot product and pgvector's cosine distance is
``1 - dot``. A pool whose vectors have another dimension is refused at worker start and
by :func:`embed_texts` (:class:`EmbeddingUnavailable` ``dimension_mismatch``).

When no embedding worker is live, or one does not answer within the timeout, the calls
raise :class:`EmbeddingUnavailable` at once (no worker) or at the timeout; callers decide
what a missing vector means (a turn answers without memory; an API request gets a 503).

This module imports neither torch nor sentence-transformers: only the engine module
:mod:`inference.engines.sbert`, loaded by embedding workers, does.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypedDict, TypeVar, Unpack

from django.conf import settings

from inference import keys, protocol, redis_types
from inference.connections import redis_async, redis_sync
from inference.embedding_model import EMBEDDING_DIM
from inference.liveness import workers_live_on
from inference.steps import Steps, asteps_run, pipelined, steps_run
from inference.vectors import vectors_decode

# Error codes of EmbeddingUnavailable.
NO_WORKER = "embedding_unavailable"
TIMEOUT = "embedding_timeout"
FAILED = "embedding_failed"
DIMENSION_MISMATCH = "dimension_mismatch"

T = TypeVar("T")

# How long an embed job's result stream lives (s); the caller deletes it once read.
_RESULT_TTL_S = 120


class EmbeddingUnavailable(Exception):
    """No vector could be had: no live worker, a timeout, a failed engine, or a pool
    serving vectors of the wrong dimension. ``code`` is one of the module's codes;
    the message is written for a person."""

    def __init__(self, message: str, *, code: str = NO_WORKER) -> None:
        super().__init__(message)
        self.code = code


@dataclass
class Embeddings:
    """The result of one embedding request: one vector per input text, in order.

    ``vectors``: ``len(input)`` lists of ``dim`` floats, unit length; ``tokens``: input
    tokens the model read (billed as prompt tokens); ``model``: the model that served.
    """

    vectors: list[list[float]]
    tokens: int
    model: str
    dim: int


def _jobs(texts: list[str], *, timeout_s: float, user_ref: str) -> list[protocol.Job]:
    """Split ``texts`` into embed jobs of at most EMBEDDING_JOB_MAX_TEXTS texts each, so
    no single job holds a worker for long (workers batch jobs back together)."""
    size = max(1, settings.EMBEDDING_JOB_MAX_TEXTS)
    now = time.time()
    starts = range(0, len(texts), size)
    # one slot for all (their result streams are read by one XREAD)
    job_ids = keys.job_ids_grouped(protocol.new_job_id(), len(starts))
    return [
        protocol.Job(
            job_id=job_id,
            messages=[],
            kind=protocol.KIND_EMBED,
            input=texts[i : i + size],
            user_ref=user_ref,
            enqueued_at=now,
            deadline=now + timeout_s,
        )
        for job_id, i in zip(job_ids, starts, strict=True)
    ]


class _Answers:
    """The terminal events of a request's jobs, collected as they arrive."""

    def __init__(self, jobs: list[protocol.Job], pool: str) -> None:
        self.jobs = jobs
        self.pool = pool
        self.results: dict[str, Embeddings] = {}
        self.keys = {keys.gen_key(job.job_id): job for job in jobs}

    def streams(self) -> redis_types.StreamOffsets:
        """The result streams still awaited (XREAD argument)."""
        return {
            key: protocol.STREAM_START
            for key, job in self.keys.items()
            if job.job_id not in self.results
        }

    def take(self, found: Any) -> None:
        """Record the events of an XREAD answer; raise EmbeddingUnavailable on an error."""
        for key, entries in found or []:
            job = self.keys[key.decode() if isinstance(key, bytes) else key]
            entry_id, fields = entries[0]
            self.results[job.job_id] = _result(
                protocol.event_parse(entry_id, fields),
                count=len(job.input),
                pool=self.pool,
            )

    @property
    def done(self) -> bool:
        """True once every job has answered."""
        return len(self.results) == len(self.jobs)

    def combined(self) -> Embeddings:
        """All jobs' vectors in input order, their tokens summed."""
        parts = [self.results[job.job_id] for job in self.jobs]
        return Embeddings(
            vectors=[v for part in parts for v in part.vectors],
            tokens=sum(part.tokens for part in parts),
            model=parts[0].model,
            dim=parts[0].dim,
        )

    def pending_ids(self) -> list[str]:
        """The jobs still without an answer."""
        return [j.job_id for j in self.jobs if j.job_id not in self.results]


def _no_worker(pool: str) -> EmbeddingUnavailable:
    return EmbeddingUnavailable(
        f"No embedding worker is running for pool {pool!r}, so memory, document "
        "search and the semantic cache are unavailable for now.",
        code=NO_WORKER,
    )


def _timed_out(pool: str, timeout_s: float) -> EmbeddingUnavailable:
    return EmbeddingUnavailable(
        f"The embedding pool {pool!r} did not answer within {timeout_s:g} s.",
        code=TIMEOUT,
    )


def _result(event: protocol.Event, *, count: int, pool: str) -> Embeddings:
    """Turn a terminal event into :class:`Embeddings` or raise EmbeddingUnavailable."""
    data = event.data
    if event.type == protocol.EVENT_ERROR:
        raise EmbeddingUnavailable(
            f"The embedding pool {pool!r} failed: {data.get('message', '')}",
            code=TIMEOUT
            if data.get("code") == protocol.ERROR_QUEUE_TIMEOUT
            else FAILED,
        )
    if event.type != protocol.EVENT_EMBEDDING:
        raise EmbeddingUnavailable(
            f"The pool {pool!r} answered an embedding request with a {event.type!r} "
            "event: it is not an embedding pool.",
            code=FAILED,
        )
    if data["dim"] != EMBEDDING_DIM:
        raise EmbeddingUnavailable(
            f"The embedding pool {pool!r} serves {data['dim']}-d vectors, but stored "
            f"vectors are {EMBEDDING_DIM}-d: point EMBEDDING_POOL at a {EMBEDDING_DIM}-d "
            "model, or re-embed everything after changing the columns.",
            code=DIMENSION_MISMATCH,
        )
    if data["count"] != count:
        raise EmbeddingUnavailable(
            f"The embedding pool {pool!r} returned {data['count']} vectors for "
            f"{count} texts.",
            code=FAILED,
        )
    return Embeddings(
        vectors=vectors_decode(data["vectors"], count=count, dim=data["dim"]),
        tokens=int(data["usage"]["prompt_tokens"]),
        model=data["model"],
        dim=data["dim"],
    )


class EmbedOptions(TypedDict, total=False):
    """The options of an embedding request (:func:`embed_texts`)."""

    pool: str | None
    timeout_s: float | None
    user_ref: str
    bulk: bool


def _xread(client: Any, *, streams: redis_types.StreamOffsets, block_ms: int) -> Any:
    return client.xread(streams, count=1, block=block_ms)


def _xread_deleting(
    client: Any, *, streams: redis_types.StreamOffsets, block_ms: int
) -> Any:
    """XREAD one result stream, then DEL it, in one round trip: Redis runs the DEL
    once the blocked read is answered (or timed out: the stream, written later, is
    read by the next call). Returns ``[xread reply, deleted count]``. Only for one
    stream: with more, a stream answered between the read and the DEL would go
    unread."""
    pipe = client.pipeline(transaction=False)
    pipe.xread(streams, count=1, block=block_ms)
    pipe.delete(*streams)
    return pipe.execute()


def _embed_steps(
    texts: list[str],
    *,
    pool: str | None = None,
    timeout_s: float | None = None,
    user_ref: str = "",
    bulk: bool = False,
    meanwhile: Callable[[], object] | None = None,
) -> Steps[Embeddings]:
    """The Redis commands of one embedding request (:func:`embed_texts`), in order,
    for either driver: returns the :class:`Embeddings`; raises
    :class:`EmbeddingUnavailable`. Whatever ends the request early (that, or a
    cancellation thrown in) marks its unanswered jobs as ended; its result streams are
    deleted in every case. ``meanwhile`` (sync driver only) runs once the jobs are
    enqueued, before the first wait."""
    texts = list(texts)
    if not texts:
        return Embeddings(vectors=[], tokens=0, model="", dim=EMBEDDING_DIM)
    pool = pool or settings.EMBEDDING_POOL
    timeout_s = float(timeout_s or settings.EMBEDDING_TIMEOUT_S)
    jobs = _jobs(texts, timeout_s=timeout_s, user_ref=user_ref)
    answers = _Answers(jobs, pool)
    queue = keys.background_queue_key(pool) if bulk else keys.queue_key(pool)

    def enqueue(pipe: Any) -> None:
        workers_live_on(pipe, pool=pool)
        for job in jobs:
            pipe.xadd(queue, job.to_fields())

    def give_up(pipe: Any) -> None:
        for job_id in answers.pending_ids():
            pipe.set(keys.final_key(job_id), "1", ex=_RESULT_TTL_S)

    # The liveness check and the jobs go in one round trip; with no live worker the
    # jobs just queued are taken back (and marked ended, for a worker starting now).
    live, *entry_ids = yield (lambda c: pipelined(c, enqueue), False)
    if not live:

        def take_back(pipe: Any) -> None:
            pipe.xdel(queue, *entry_ids)
            give_up(pipe)

        yield (lambda c: pipelined(c, take_back), True)
        raise _no_worker(pool)
    deleted = False
    try:
        if meanwhile is not None:
            meanwhile()
        while not answers.done:
            remaining = jobs[0].deadline - time.time()
            if remaining <= 0:
                raise _timed_out(pool, timeout_s)
            # Wake at least once a second to notice that the pool's last worker died.
            block_ms = max(1, int(min(remaining, 1.0) * 1000))
            streams = answers.streams()
            if len(jobs) == 1:  # one stream: read and deleted in one round trip
                read = functools.partial(
                    _xread_deleting, streams=streams, block_ms=block_ms
                )
                found, _ = yield (read, False)
                deleted = bool(found)
            else:
                read = functools.partial(_xread, streams=streams, block_ms=block_ms)
                found = yield (read, False)
            answers.take(found)
            if not found and not (
                yield (lambda c: workers_live_on(c, pool=pool), False)
            ):
                raise _no_worker(pool)
        return answers.combined()
    except (EmbeddingUnavailable, asyncio.CancelledError):
        yield (lambda c: pipelined(c, give_up), True)
        raise
    finally:
        if not deleted:
            yield (lambda c: c.delete(*answers.keys), False)


def embed_texts(
    texts: list[str],
    *,
    meanwhile: Callable[[], object] | None = None,
    **options: Unpack[EmbedOptions],
) -> Embeddings:
    """Embed ``texts`` on the embedding pool; block until the vectors arrive (sync).

    For request threads, Celery tasks and commands, never an event loop. ``pool``
    defaults to EMBEDDING_POOL and ``timeout_s`` (seconds, enqueue to answer) to
    EMBEDDING_TIMEOUT_S. ``bulk`` (document ingestion, large requests) queues on the
    pool's bulk queue, which workers serve only when no interactive job waits. The
    texts travel as jobs of at most EMBEDDING_JOB_MAX_TEXTS. An empty list needs no
    worker. Raises :class:`EmbeddingUnavailable` at once when the pool has no live
    worker, and when the answer does not come in time (the jobs are then ended, so no
    worker runs them later). ``meanwhile``: the caller's work that needs no vector,
    run once the jobs are enqueued and before waiting, so it overlaps the forward pass
    (not run when no worker is live).
    """
    return steps_run(_embed_steps(texts, meanwhile=meanwhile, **options), redis_sync())


async def aembed_texts(texts: list[str], **options: Unpack[EmbedOptions]) -> Embeddings:
    """Embed ``texts`` without blocking the event loop; see :func:`embed_texts` (the
    same steps). A caller cancelled while waiting (a client that left) ends its jobs
    too."""
    return await asteps_run(_embed_steps(texts, **options), redis_async())


def embed_text(text: str, **options: Any) -> list[float]:
    """Embed one text; return its unit-length 384-d vector. See :func:`embed_texts`."""
    return embed_texts([text], **options).vectors[0]


class TextVector:
    """One text's embedding, computed at most once and shared by everyone who needs it.

    A turn makes one for the user's message and hands it to input moderation, retrieval,
    facts and the semantic cache, so the text is embedded once per turn. ``vector``
    raises :class:`EmbeddingUnavailable` (remembered: a second read does not wait
    again); ``get()`` returns None instead.
    """

    def __init__(self, text: str) -> None:
        self.text = text
        self._vector: list[float] | None = None
        self._error: EmbeddingUnavailable | None = None

    @property
    def embedded(self) -> list[float] | None:
        """The vector if it has been computed already, else None (never embeds)."""
        return self._vector

    @property
    def vector(self) -> list[float]:
        """The 384-d unit vector of ``text`` (embedded on first read)."""
        if self._error is not None:
            raise self._error
        if self._vector is None:
            try:
                self._vector = embed_texts([self.text]).vectors[0]
            except EmbeddingUnavailable as exc:
                self._error = exc
                raise
        return self._vector

    def vector_meanwhile(self, work: Callable[[], T]) -> tuple[list[float], T]:
        """``vector`` and what ``work()`` returns, ``work`` (the caller's, needing no
        vector) run while the text is embedded: once its job is enqueued, before the
        wait (:func:`embed_texts`' ``meanwhile``), so it overlaps the forward pass;
        when the vector is there already, ``work`` just runs. Raises
        :class:`EmbeddingUnavailable` as ``vector`` does (``work`` may then not
        have run)."""
        done: list[T] = []
        if self._error is None and self._vector is None:
            try:
                self._vector = embed_texts(
                    [self.text], meanwhile=lambda: done.append(work())
                ).vectors[0]
            except EmbeddingUnavailable as exc:
                self._error = exc
                raise
        vector = self.vector
        return vector, done[0] if done else work()

    def get(self) -> list[float] | None:
        """The vector, or None when embeddings are unavailable (see ``error``)."""
        try:
            return self.vector
        except EmbeddingUnavailable:
            return None

    @property
    def error(self) -> EmbeddingUnavailable | None:
        """Why the vector could not be had, once a read failed."""
        return self._error
