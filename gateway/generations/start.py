"""Start a generation: admit, store (the caller's rows), submit — one path for every surface.

:func:`generation_start` is what the chat turn, the OpenAI-compatible API and
evaluation call, each with the :class:`GenerationRequest` it built. The order is fixed
so that no I/O happens under a row lock and no token budget leaks:

1. admission (input moderation, routing, the quota reservation, the caches, admission
   control) — Redis and the database, outside any transaction;
2. ``store(admission)`` — the caller's rows (the chat's messages) in one short,
   durable transaction; nothing else runs inside it (a store that writes with one
   statement runs without it: the statement is its own transaction);
3. submission — the job is enqueued (or a cache hit written as its stream) after that
   transaction committed.

A failure in 2 or 3 releases the reservation (:func:`reservation_guard`); a process
that dies between 1 and 3 leaves an unsubmitted reservation that the periodic sweep
releases after GATEWAY_RESERVATION_SUBMIT_TIMEOUT_S seconds.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from django.conf import settings
from django.db import connection, transaction

from gateway import cache, fallback, quota
from gateway.cache import CacheHit
from gateway.generations.admission import (
    Admission,
    generation_admit,
    generation_release,
    reservation_guard,
)
from gateway.generations.request import GenerationRequest
from inference import affinity, jobs, protocol
from inference import client as inference_client
from inference.connections import redis_sync

T = TypeVar("T")


@dataclass
class Generation:
    """A submitted generation: what following and settling it need.

    ``enqueued_at`` is epoch seconds; ``cache_kind`` is ``exact``/``semantic`` when a
    cache answers (no job runs), else "". ``pool`` changes when a fallback retry moves
    the job (:mod:`gateway.fallback`). ``surface``: chat / api (what moderation events
    name; "" when unknown). ``prefix``: the answer's text before this generation
    when it continues one (the stream policies read it first, so they screen the
    whole answer; only the generation's own text is released); "" otherwise.
    """

    job_id: str
    user_id: int
    pool: str
    model: str
    enqueued_at: float
    cache_kind: str = ""
    surface: str = ""
    prefix: str = ""

    @property
    def created(self) -> int:
        """Epoch seconds of the enqueue (OpenAI's ``created``)."""
        return int(self.enqueued_at)


@dataclass
class Started(Generic[T]):
    """A started generation and what ``store`` returned for it."""

    generation: Generation
    admission: Admission
    stored: T


def generation_submit(
    *,
    user_id: int,
    job_id: str,
    messages: list[dict[str, str]],
    params: dict[str, Any],
    user_ref: str,
    pool: str,
    enqueued_at: float | None = None,
    cache_hit: CacheHit | None = None,
    affinity_read: affinity.AffinityRead | None = None,
) -> float:
    """Enqueue an admitted generation on ``pool``; return its enqueue time (epoch s).

    With INFERENCE_AFFINITY the job names its conversation and goes to the worker
    that served the conversation's previous turn when that one is live and has a free
    slot (:mod:`inference.affinity`), else to the pool's queue; ``affinity_read``:
    that worker as the admission read it (:attr:`Admission.affinity`; None: read
    here).
    The job expires INFERENCE_QUEUE_TIMEOUT_S after ``enqueued_at``. With ``cache_hit``
    (from the admission) nothing is enqueued: the cached answer is written as the
    generation's stream (:func:`gateway.cache.cache_serve`). Call after the
    transaction that stored the request committed.
    """
    now = time.time() if enqueued_at is None else enqueued_at
    if cache_hit is not None:
        cache.cache_serve(job_id=job_id, hit=cache_hit, enqueued_at=now)
        return now
    job = jobs.job_build(
        job_id=job_id,
        messages=messages,
        params=params,
        user_ref=user_ref,
        enqueued_at=now,
        timeout_s=settings.INFERENCE_QUEUE_TIMEOUT_S,
    )
    worker = None
    if settings.INFERENCE_AFFINITY:
        # the worker that served the conversation's previous turn, if live and free
        job.affinity = affinity.affinity_of(user_ref=user_ref, messages=messages)
        worker = affinity.job_route(
            redis_sync(), pool=pool, job=job, read=affinity_read
        )
    # One round trip, in this order: the job is kept for a fallback retry, enqueued,
    # and its reservation marked submitted. Its three keys are in three slots (job,
    # pool, sweep bucket), so no MULTI on a cluster; a crash between the enqueue and
    # the mark can leave the job running with its reservation swept after
    # GATEWAY_RESERVATION_SUBMIT_TIMEOUT_S (its usage uncharged), never a budget held
    # for a job that was never enqueued.
    entry = job.to_fields()  # once: the kept job and the queue entry are the same JSON
    with redis_sync().pipeline(transaction=False) as pipe:
        fallback.job_remember(job=job, client=pipe, entry=entry)
        inference_client.job_enqueue(
            pool=pool, job=job, client=pipe, worker=worker, entry=entry
        )
        quota.quota_reservation_submitted(user_id=user_id, job_id=job_id, client=pipe)
        pipe.execute()
    return now


def generation_start(
    request: GenerationRequest,
    *,
    store: Callable[[Admission], T] | None = None,
    store_atomic: bool = True,
    job_id: str | None = None,
) -> Started[T | None]:
    """Admit, store and submit ``request`` (see the module docstring for the order).

    Admission is :func:`generation_admit` (the request's fields are described on
    :class:`GenerationRequest`). ``store`` runs in its own durable transaction (it may
    not be called inside one) and returns what the caller wants back; it may raise a
    DomainError (e.g. Conflict) to refuse the request. ``store_atomic`` False: ``store``
    writes the database with at most one statement, so in autocommit that statement
    is its own transaction (its deferred constraints checked at its end) and the
    BEGIN and COMMIT around it (two round trips) are left out; what else it does
    must leave nothing to undo if it raises after that statement (called inside a
    transaction it still gets the durable one, which refuses that). ``job_id``: the job's id
    (None: a new one). Raises the admission's errors (ModerationBlocked,
    ModerationUnavailable, ContextOverflow, QuotaExceeded, PoolSaturated, NotFound,
    Forbidden) and whatever ``store`` raises; nothing stays reserved or enqueued then.
    """
    job_id = job_id or protocol.new_job_id()
    with reservation_guard(user_id=request.user.pk, job_id=job_id):
        admission = generation_admit(request, job_id=job_id)
        stored = None
        if store is not None:
            # called inside a transaction, the durable atomic refuses (tests allow it)
            if store_atomic or connection.in_atomic_block:
                with transaction.atomic(durable=True):
                    stored = store(admission)
            else:
                stored = store(admission)
        enqueued_at = generation_submit(
            user_id=request.user.pk,
            job_id=job_id,
            messages=request.messages,
            params=admission.params,
            user_ref=str(request.user.pk),
            pool=admission.pool,
            cache_hit=admission.cache_hit,
            affinity_read=admission.affinity,
        )
    generation = Generation(
        job_id=job_id,
        user_id=request.user.pk,
        pool=admission.pool,
        model=admission.model or (request.model or ""),
        enqueued_at=enqueued_at,
        cache_kind=admission.cache_hit.kind if admission.cache_hit else "",
        surface=request.surface,
    )
    return Started(generation=generation, admission=admission, stored=stored)


def generation_cancel(*, job_id: str) -> None:
    """Ask the worker running ``job_id`` to stop; the partial answer is kept. A
    generation no worker has started yet (still queued) ends at once, cancelled and
    empty (:func:`inference.client.job_stop`)."""
    inference_client.job_stop(job_id=job_id, ttl_s=settings.INFERENCE_STREAM_TTL_S)


def generation_abandon(*, user_id: int, job_id: str) -> None:
    """Cancel a generation nobody will settle (its answer was deleted); release quota."""
    generation_cancel(job_id=job_id)
    generation_release(user_id=user_id, job_id=job_id)
