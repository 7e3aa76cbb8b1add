"""Settle a generation once: its outcome stored, its usage recorded, its quota settled.

Whoever sees a generation's terminal event first settles it — the relay that follows
it (:mod:`gateway.generations.follow`), or the periodic reaper
(:func:`generation_sweep`) when nobody follows it. Settlement is idempotent: the
surface's own record (the chat's answer message) is written by a conditional update
and the :class:`UsageRecord` is unique per job, both in one transaction, so a second
settler changes nothing.

An engine error before the first token is not settled: the job is retried on the
failed pool's fallback (:mod:`gateway.fallback`) and settled when the retry ends.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Protocol

from django.conf import settings
from django.db import DatabaseError, IntegrityError, transaction
from redis.exceptions import RedisError

from chatsite.errors import ServiceUnavailable
from gateway import cache, fallback, quota, selectors
from gateway.generations.outcome import (
    Outcome,
    generation_failed,
    outcome_filtered,
    outcome_from_events,
)
from gateway.generations.policy import PolicyChain, chain_replay, policies_for
from gateway.generations.start import Generation
from gateway.models import ModelPool, UsageRecord
from inference import client as inference_client
from inference import protocol, watchdog
from inference.jobs import FINISH_ERROR

logger = logging.getLogger(__name__)

LOST_MESSAGE = "This answer was lost. Please regenerate it."


class Recorder(Protocol):
    """What a surface stores of a generation besides its usage (the chat: its answer).

    Both methods run in the settling transaction / the retry; they must be idempotent.
    """

    def rerouted(self, *, job_id: str, pool: str) -> None:
        """The job was moved to ``pool`` by a fallback retry."""

    def finalize(self, *, job_id: str, outcome: Outcome) -> bool:
        """Store ``outcome``; return False if the generation was already final."""


@dataclass
class Settlement:
    """What :func:`generation_settle` did: ``state`` is ``running`` (no terminal event
    yet), ``retried`` (moved to ``pool``; follow it again from its start),
    ``settled`` (this call settled it) or ``already`` (another settler was first).
    ``outcome`` is set for settled and already."""

    state: str
    outcome: Outcome | None = None
    pool: str = ""


def usage_cost(
    *, pool: ModelPool | None, prompt_tokens: int, completion_tokens: int
) -> Decimal:
    """Return the cost of a request from its pool's prices per 1,000 tokens (0 if none).

    Cached prompt tokens are priced as input tokens (no discount yet).
    """
    if pool is None:
        return Decimal("0")
    cost = (
        pool.price_input_per_1k * prompt_tokens
        + pool.price_output_per_1k * completion_tokens
    ) / 1000
    return cost.quantize(Decimal("0.000001"))


def usage_settle(
    *,
    user_id: int,
    job_id: str,
    status: str,
    usage: protocol.Usage,
    pool: str = "",
    model: str = "",
    message_id: Any = None,
    ttft_ms: int | None = None,
    latency_ms: int | None = None,
    cache_hit: bool = False,
    answer: str | None = None,
    finish_reason: str = "",
) -> UsageRecord | None:
    """Record a finished request once and settle its reservation to the actual usage.

    ``status`` is a :class:`UsageRecord.Status`; ``usage`` is what is billed, whatever
    the status: an ``error`` bills what its outcome says (nothing before the first
    token, the tokens spent after it: :func:`inference.jobs.usage_spent`);
    a ``cache_hit`` costs nothing (its record holds zero tokens and cost 0, whatever
    usage the hit reported to the client: the original generation's). The quota counters move after
    the surrounding transaction commits; then the answer (``answer`` text,
    ``finish_reason``) is stored
    in the caches if the request was admitted as cacheable and the answer is complete
    (:func:`gateway.cache.cache_settle`). Idempotent: returns the new record, or None
    if this job was already settled (another settler was first).
    """
    if cache_hit:
        usage = protocol.Usage()
    pool_obj = selectors.pool_get(name=pool) if pool else None
    # No savepoint of its own (one round trip less each way): a failure here fails
    # the caller's whole transaction anyway.
    with transaction.atomic(savepoint=False):
        try:
            # INSERT first (the usual case: this job was not settled yet), in a
            # savepoint: a concurrent settler's row makes it an IntegrityError on the
            # unique job_id, and the surrounding transaction goes on. get_or_create
            # spent a SELECT and the same savepoint on every settlement.
            with transaction.atomic():
                record = UsageRecord.objects.create(
                    job_id=job_id,
                    user_id=user_id,
                    pool=pool,
                    model=model,
                    prompt_tokens=usage.prompt_tokens,
                    completion_tokens=usage.completion_tokens,
                    cached_tokens=usage.cached_tokens,
                    cost=usage_cost(
                        pool=pool_obj,
                        prompt_tokens=usage.prompt_tokens,
                        completion_tokens=usage.completion_tokens,
                    ),
                    ttft_ms=ttft_ms,
                    latency_ms=latency_ms,
                    cache_hit=cache_hit,
                    status=status,
                    message_id=message_id,
                )
        except IntegrityError:
            if not UsageRecord.objects.filter(job_id=job_id).exists():
                raise  # another constraint (e.g. a deleted message): not a race
            return None
        tokens = usage.total_tokens
        transaction.on_commit(
            lambda: quota.quota_settle(user_id=user_id, job_id=job_id, tokens=tokens)
        )
        transaction.on_commit(
            lambda: cache.cache_settle(
                job_id=job_id,
                pool=pool,
                status=status,
                finish_reason=finish_reason,
                answer=answer,
                answer_model=model,
                cache_hit=cache_hit,
                usage=usage,
            ),
            robust=True,
        )
    return record


def outcome_settle(
    *,
    generation: Generation,
    outcome: Outcome,
    recorder: Recorder | None = None,
    message_id: Any = None,
) -> bool:
    """Store ``outcome`` through ``recorder`` and record its usage, once, atomically.

    Returns True if this call settled the generation, False if it was already settled.
    """
    # no savepoint: nothing inside is caught here, a failure fails the whole settlement
    with transaction.atomic(savepoint=False):
        if recorder is not None and not recorder.finalize(
            job_id=generation.job_id, outcome=outcome
        ):
            return False
        record = usage_settle(
            user_id=generation.user_id,
            job_id=generation.job_id,
            status=outcome.status,
            usage=outcome.usage,
            pool=generation.pool,
            model=outcome.model or generation.model,
            message_id=message_id,
            ttft_ms=outcome.ttft_ms,
            latency_ms=outcome.latency_ms,
            cache_hit=bool(outcome.cache_kind),
            answer=outcome.text,
            finish_reason=outcome.finish_reason,
        )
    return record is not None or recorder is not None


def generation_settle(
    *,
    generation: Generation,
    recorder: Recorder | None = None,
    message_id: Any = None,
) -> Settlement:
    """Settle ``generation`` from its Redis stream if it has ended (sync).

    Reads the stream to its terminal event; an engine error before the first token is
    retried on the fallback pool instead (``generation.pool`` and the recorder are
    updated). Otherwise the outcome (:func:`outcome_from_events`, the stream policies
    replayed over its text) is settled by :func:`outcome_settle`. Raises what the
    database or Redis raise (the caller retries or leaves it to the reaper).
    """
    events = inference_client.generation_events(job_id=generation.job_id)
    if not events or not events[-1].is_terminal:
        return Settlement("running")
    terminal = events[-1]
    has_text = any(e.type == protocol.EVENT_TOKEN for e in events)
    if terminal.type == protocol.EVENT_ERROR and not has_text:
        retried_on = fallback.generation_retry(
            job_id=generation.job_id,
            pool=generation.pool,
            error_code=terminal.data.get("code", ""),
            terminal_id=terminal.id,
        )
        if retried_on is not None:  # "" : a concurrent settler retried it already
            if retried_on:
                generation.pool = retried_on
                if recorder is not None:
                    recorder.rerouted(job_id=generation.job_id, pool=retried_on)
            return Settlement("retried", pool=retried_on or generation.pool)
    outcome, chain, generated = outcome_released(generation, events)
    with transaction.atomic():
        settled = outcome_settle(
            generation=generation,
            outcome=outcome,
            recorder=recorder,
            message_id=message_id,
        )
        if settled:
            policies_settled(
                chain,
                generation=generation,
                outcome=outcome,
                generated=generated,
                chat=recorder is not None,
                message_id=message_id,
            )
    return Settlement("settled" if settled else "already", outcome)


def outcome_released(
    generation: Generation, events: list[protocol.Event]
) -> tuple[Outcome, PolicyChain | None, str]:
    """The outcome of ``generation``'s ended stream ``events`` (:func:`outcome_from_events`)
    with the stream policies replayed over its text: the text as released, or the
    outcome ``filtered`` when a policy cut it. Returns it, the policies (None when
    none is active; :func:`policies_settled` tells them once it is settled) and the
    text the engine generated."""
    outcome = outcome_from_events(
        events, model=generation.model, cache_kind=generation.cache_kind
    )
    chain = policies_for(job_id=generation.job_id, user_id=generation.user_id)
    if chain is not None and generation.prefix:
        chain.prime(generation.prefix)  # a continued answer is screened whole
    generated = outcome.text
    released = chain_replay(chain, generated)
    if released.cut:
        outcome = outcome_filtered(
            outcome, released=released.text, reason=released.reason
        )
    else:
        outcome.text = released.text
    return outcome, chain, generated


def policies_settled(
    chain: PolicyChain | None,
    *,
    generation: Generation,
    outcome: Outcome,
    generated: str,
    chat: bool,
    message_id: Any,
) -> None:
    """Tell ``chain`` (from :func:`outcome_released`) that its generation was settled
    (in the settling transaction); nothing for an error or without policies."""
    if chain is None or outcome.error is not None:
        return
    chain.settled(
        generated=generation.prefix + generated,
        surface=generation.surface or ("chat" if chat else "api"),
        message_id=message_id,
    )


# What a failing database or Redis raise: a settlement that meets one is retried
# (:func:`asettle_retrying`), a follower that meets one reports a broken stream.
BACKEND_ERRORS = (RedisError, DatabaseError, OSError, ServiceUnavailable)


def generation_watch(generation: Generation) -> watchdog.Watch:
    """Return what the watchdog checks of ``generation``: its pool (default
    INFERENCE_DEFAULT_POOL), INFERENCE_QUEUE_TIMEOUT_S and INFERENCE_NO_WORKER_GRACE_S
    (the rules: :meth:`inference.watchdog.Watch.due`). The follower runs it on the
    event loop (:func:`inference.waiting.agen_watchdog`), the reaper sync
    (:func:`inference.watchdog.generation_watchdog`)."""
    return watchdog.Watch(
        job_id=generation.job_id,
        pool=generation.pool or settings.INFERENCE_DEFAULT_POOL,
        enqueued_at=generation.enqueued_at,
        queue_timeout_s=settings.INFERENCE_QUEUE_TIMEOUT_S,
        no_worker_grace_s=settings.INFERENCE_NO_WORKER_GRACE_S,
    )


def generation_sweep(
    *,
    generation: Generation,
    recorder: Recorder | None = None,
    message_id: Any = None,
    now: float | None = None,
) -> bool:
    """Settle a generation nobody follows (the reaper's step); True if it was settled.

    Settles it if its stream ended; else applies the watchdog and settles what that
    ended; a generation whose stream is gone (never written, or expired) for more than
    REAPER_STALE_AFTER_S seconds after its enqueue is settled as an error with nothing
    billed (:data:`LOST_MESSAGE`).
    """
    now = time.time() if now is None else now
    settled = generation_settle(
        generation=generation, recorder=recorder, message_id=message_id
    )
    if settled.state != "running":
        return settled.state == "settled"
    events = inference_client.generation_events(job_id=generation.job_id)
    started = bool(events)
    stale = now - generation.enqueued_at > settings.REAPER_STALE_AFTER_S
    if (
        not started
        and stale
        and not inference_client.generation_exists(job_id=generation.job_id)
    ):
        lost = Outcome(
            status=UsageRecord.Status.ERROR,
            finish_reason=FINISH_ERROR,
            model=generation.model,
            error=generation_failed(
                code=protocol.ERROR_WORKER_LOST, message=LOST_MESSAGE
            ),
        )
        return outcome_settle(
            generation=generation,
            outcome=lost,
            recorder=recorder,
            message_id=message_id,
        )
    last_event_at = _entry_time(events[-1].id) if events else generation.enqueued_at
    if watchdog.generation_watchdog(
        generation_watch(generation), started=started, last_event_at=last_event_at
    ):
        settled = generation_settle(
            generation=generation, recorder=recorder, message_id=message_id
        )
        return settled.state == "settled"
    return False


def _entry_time(entry_id: str) -> float:
    """Return the epoch seconds encoded in a Redis stream entry id."""
    return int(entry_id.split("-", 1)[0]) / 1000.0
