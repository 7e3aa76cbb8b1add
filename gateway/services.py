"""Gateway services: admit, submit, cancel and settle generations; API keys; user
preferences (DESIGN §4.2).

A request goes through :func:`generation_admit` before anything is stored: route to a
pool (plan, explicit choice, difficulty), reserve its worst-case tokens atomically
(:mod:`gateway.quota`), then admission (saturated pools fall back; all saturated: 503).
After commit :func:`generation_submit` enqueues it. When its generation ends,
:func:`usage_settle` writes the one :class:`UsageRecord` and settles the reservation to
the actual usage; :func:`generation_release` gives a reservation back (rejected, failed
or abandoned request). Admission also consults the answer caches (:mod:`gateway.cache`):
a hit is admitted with ``cache_hit`` set and its reservation released, and
:func:`generation_submit` then writes the cached answer as the generation's stream
instead of enqueueing a job; settlement records it (cost 0) and stores complete
answers in the caches.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import secrets
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from chatsite.errors import NotFound
from gateway import cache, fallback, quota, routing, selectors
from gateway.cache import CacheHit, CachePolicy
from gateway.models import ApiKey, ModelPool, UsageRecord, UserPreference
from inference import client as inference_client
from inference import protocol

API_KEY_PREFIX = "sk-"

__all__ = ["CacheHit", "CachePolicy"]  # re-exported for the chat turn and the API


@dataclass
class Submission:
    """Where and when a generation was queued (epoch seconds)."""

    job_id: str
    pool: str
    enqueued_at: float
    deadline: float


@dataclass
class Admission:
    """An admitted request: its pool and its reserved tokens.

    ``params`` are the sampling parameters to enqueue (``max_tokens`` capped at the
    pool's ``max_output_tokens``); ``reserved_tokens`` = estimated prompt tokens +
    ``max_tokens``. With ``cache_hit`` the answer comes from a cache: nothing is
    reserved (``reserved_tokens`` 0) and :func:`generation_submit` must be given it.
    """

    job_id: str
    pool: str
    model: str
    params: dict[str, Any]
    reserved_tokens: int
    cache_hit: CacheHit | None = None


def prompt_tokens_estimate(messages: list[dict[str, str]]) -> int:
    """Return a deliberately high estimate of a prompt's tokens, for reservations only.

    ``ceil(characters / GATEWAY_CHARS_PER_TOKEN) + 4`` per message (the chat template's
    overhead) plus 2. The web tier has no tokenizer of the serving model; the real count
    comes with the terminal event and settlement corrects the reservation to it.
    """
    per_token = settings.GATEWAY_CHARS_PER_TOKEN
    return 2 + sum(
        4 + math.ceil(len(str(m.get("content", ""))) / per_token) for m in messages
    )


def pool_route(*, requested: str | None = None) -> str:
    """Return the pool name a request goes to without a plan (default pool)."""
    return requested or settings.INFERENCE_DEFAULT_POOL


def generation_admit(
    *,
    user: AbstractBaseUser,
    job_id: str,
    messages: list[dict[str, str]],
    params: dict[str, Any],
    model: str | None = None,
    cache_policy: CachePolicy | None = None,
    prompt_tokens: int | None = None,
) -> Admission:
    """Route, reserve quota and admit a request; call before storing anything.

    ``messages`` are the OpenAI chat messages to send; ``params["max_tokens"]`` is in
    tokens; ``params["cache"]`` true opts in to cached answers (it is never enqueued);
    ``model`` an explicit pool/model choice. ``cache_policy`` (None: no cache) lets the
    request use the answer caches (:mod:`gateway.cache`): after the reservation the
    routed pool's caches are looked up; on a hit the reservation is released and the
    returned admission carries ``cache_hit`` (a saturated pool does not matter then).
    ``prompt_tokens``: the prompt's tokens counted with the serving model's tokenizer
    and chat template, when the caller has them; the reservation is then exact, else
    it uses :func:`prompt_tokens_estimate`. A reservation below the real prompt would
    let concurrent requests spend past a limit.
    Raises NotFound / Forbidden (model choice), QuotaExceeded (429, nothing reserved),
    PoolSaturated (503, the reservation is given back). On success the caller owns the
    reservation: it must end in :func:`usage_settle` or :func:`generation_release`.
    """
    plan = selectors.plan_for_user(user=user)
    pool = routing.pool_choose(plan=plan, messages=messages, requested=model)
    params = dict(params)
    opt_in = bool(params.pop(cache.CACHE_PARAM, False))
    max_tokens = int(params.get("max_tokens") or settings.CHAT_MAX_TOKENS)
    params["max_tokens"] = max(1, min(max_tokens, pool.max_output_tokens))
    if prompt_tokens is None:
        prompt_tokens = prompt_tokens_estimate(messages)
    reserved = prompt_tokens + params["max_tokens"]
    _quota_seed_from_records(user_id=user.pk)
    quota.quota_reserve(
        user_id=user.pk,
        job_id=job_id,
        tokens=reserved,
        limits=selectors.plan_limits(plan=plan),
    )
    material = None
    try:
        if cache_policy is not None:
            if opt_in and not cache_policy.opt_in:
                cache_policy = dataclasses.replace(cache_policy, opt_in=True)
            material = cache.cache_prepare(
                user_id=user.pk, messages=messages, params=params, policy=cache_policy
            )
        hit = (
            cache.cache_lookup(material=material, pool=pool.name, model=pool.model)
            if material is not None
            else None
        )
        if hit is not None:
            quota.quota_release(job_id=job_id)
            return Admission(
                job_id=job_id,
                pool=pool.name,
                model=pool.model,
                params=params,
                reserved_tokens=0,
                cache_hit=hit,
            )
        pool = routing.pool_admit(pool=pool, plan=plan)
    except BaseException:
        quota.quota_release(job_id=job_id)
        raise
    params["max_tokens"] = min(params["max_tokens"], pool.max_output_tokens)
    if material is not None:
        material.params = dict(params)
        cache.cache_pending_store(
            job_id=job_id, material=material, pool=pool.name, model=pool.model
        )
    return Admission(
        job_id=job_id,
        pool=pool.name,
        model=pool.model,
        params=params,
        reserved_tokens=reserved,
    )


def _quota_seed_from_records(*, user_id: int) -> None:
    """Seed absent day/month counters from the usage records (new period, lost Redis)."""
    for window in quota.quota_unseeded(user_id=user_id):
        period = 86400 if window.name == quota.WINDOW_DAY else None
        start = (
            datetime.fromtimestamp(window.resets_at - period, tz=UTC)
            if period
            else _month_start(window.resets_at)
        )
        quota.quota_seed(
            window=window,
            tokens=selectors.usage_tokens_since(user_id=user_id, since=start),
        )


def _month_start(month_end: float) -> datetime:
    last_day = datetime.fromtimestamp(month_end - 1, tz=UTC)
    return last_day.replace(day=1, hour=0, minute=0, second=0, microsecond=0)


def generation_release(*, job_id: str) -> None:
    """Give back a job's whole reservation (idempotent; no-op if already settled)."""
    quota.quota_release(job_id=job_id)


@contextmanager
def reservation_guard(*, job_id: str) -> Iterator[None]:
    """Release ``job_id``'s reservation if the block raises (no-op if none was made).

    Wrap the code that admits a request and stores it, so a request that fails after
    :func:`generation_admit` (a conflict, a database error) consumes nothing.
    """
    try:
        yield
    except BaseException:
        generation_release(job_id=job_id)
        raise


def generation_submit(
    *,
    job_id: str,
    messages: list[dict[str, str]],
    params: dict[str, Any],
    user_ref: str,
    pool: str,
    enqueued_at: float | None = None,
    cache_hit: CacheHit | None = None,
) -> Submission:
    """Enqueue a generation on ``pool``; the job expires INFERENCE_QUEUE_TIMEOUT_S later.

    ``messages`` are OpenAI chat messages; ``params`` are sampling parameters
    (``max_tokens`` in tokens). With ``cache_hit`` (from the admission) nothing is
    enqueued: the cached answer is written as the generation's stream
    (:func:`gateway.cache.cache_serve`). Call after the surrounding transaction commits.
    """
    now = time.time() if enqueued_at is None else enqueued_at
    if cache_hit is not None:
        cache.cache_serve(job_id=job_id, hit=cache_hit, enqueued_at=now)
        return Submission(job_id=job_id, pool=pool, enqueued_at=now, deadline=now)
    job = protocol.Job(
        job_id=job_id,
        messages=messages,
        params=params,
        user_ref=user_ref,
        enqueued_at=now,
        deadline=now + settings.INFERENCE_QUEUE_TIMEOUT_S,
    )
    fallback.job_remember(job=job)
    inference_client.job_enqueue(pool=pool, job=job)
    return Submission(job_id=job_id, pool=pool, enqueued_at=now, deadline=job.deadline)


def generation_retry(
    *, job_id: str, pool: str, error_code: str, terminal_id: str
) -> str | None:
    """Retry a generation that failed before its first token on ``pool``'s fallback.

    Returns the new pool, ``""`` if a concurrent finaliser retried it already, or None
    if it is not retried (see :func:`gateway.fallback.generation_retry`).
    """
    return fallback.generation_retry(
        job_id=job_id, pool=pool, error_code=error_code, terminal_id=terminal_id
    )


def generation_cancel(*, job_id: str) -> None:
    """Ask the worker running ``job_id`` to stop; the partial answer is kept."""
    inference_client.job_cancel(job_id=job_id, ttl_s=settings.INFERENCE_STREAM_TTL_S)


def generation_abandon(*, job_id: str) -> None:
    """Cancel a generation nobody will finalise (its answer was deleted); release quota."""
    generation_cancel(job_id=job_id)
    generation_release(job_id=job_id)


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

    ``status`` is a :class:`UsageRecord.Status`; an ``error`` consumes nothing (the
    reservation is released and the record holds zero tokens); a ``cache_hit`` costs
    nothing (zero tokens, cost 0). The quota counters move after the surrounding
    transaction commits; then the answer (``answer`` text, ``finish_reason``) is stored
    in the caches if the request was admitted as cacheable and the answer is complete
    (:func:`gateway.cache.cache_settle`). Idempotent: returns the new record, or None
    if this job was already settled (another finaliser was first).
    """
    if status == UsageRecord.Status.ERROR or cache_hit:
        usage = protocol.Usage()
    pool_obj = selectors.pool_get(name=pool) if pool else None
    with transaction.atomic():
        record, created = UsageRecord.objects.get_or_create(
            job_id=job_id,
            defaults={
                "user_id": user_id,
                "pool": pool,
                "model": model,
                "prompt_tokens": usage.prompt_tokens,
                "completion_tokens": usage.completion_tokens,
                "cached_tokens": usage.cached_tokens,
                "cost": usage_cost(
                    pool=pool_obj,
                    prompt_tokens=usage.prompt_tokens,
                    completion_tokens=usage.completion_tokens,
                ),
                "ttft_ms": ttft_ms,
                "latency_ms": latency_ms,
                "cache_hit": cache_hit,
                "status": status,
                "message_id": message_id,
            },
        )
        if not created:
            return None
        tokens = usage.total_tokens
        transaction.on_commit(lambda: quota.quota_settle(job_id=job_id, tokens=tokens))
        transaction.on_commit(
            lambda: cache.cache_settle(
                job_id=job_id,
                pool=pool,
                status=status,
                finish_reason=finish_reason,
                answer=answer,
                answer_model=model,
                cache_hit=cache_hit,
            ),
            robust=True,
        )
    return record


def _key_hash(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


def api_key_create(*, user: AbstractBaseUser, name: str = "") -> tuple[ApiKey, str]:
    """Create an API key for ``user``; return it and the secret, shown only this once.

    The secret is ``sk-`` + 43 URL-safe characters (256 random bits); only its SHA-256
    and its first 10 characters (``prefix``) are stored.
    """
    raw = API_KEY_PREFIX + secrets.token_urlsafe(32)
    key = ApiKey.objects.create(
        user=user, name=name.strip()[:100], prefix=raw[:10], key_hash=_key_hash(raw)
    )
    return key, raw


def api_key_revoke(*, key_id: Any, user: AbstractBaseUser | None = None) -> ApiKey:
    """Revoke a key (idempotent). With ``user``, only that user's key (else NotFound)."""
    keys = ApiKey.objects.all() if user is None else ApiKey.objects.filter(user=user)
    try:
        key = keys.get(pk=key_id)
    except (ApiKey.DoesNotExist, ValueError, TypeError) as exc:
        raise NotFound("This API key does not exist.") from exc
    if key.revoked_at is None:
        ApiKey.objects.filter(pk=key.pk, revoked_at__isnull=True).update(
            revoked_at=timezone.now()
        )
        key.refresh_from_db()
    return key


# ``ApiKey.last_used_at`` is written at most this often (s): a write per request would
# double the cost of authenticating one (one query instead of two).
API_KEY_LAST_USED_RESOLUTION_S = 60


def api_key_authenticate(*, raw: str) -> AbstractBaseUser | None:
    """Return the active user owning the secret ``raw``, or None.

    Stamps ``last_used_at`` when it is older than API_KEY_LAST_USED_RESOLUTION_S
    seconds (the settings page shows it to the minute).
    """
    if not raw or not raw.startswith(API_KEY_PREFIX):
        return None
    key = (
        # the subscription too: plan_for_user needs no query of its own
        ApiKey.objects.select_related("user", "user__subscription")
        .filter(key_hash=_key_hash(raw), revoked_at__isnull=True)
        .first()
    )
    if key is None or not key.user.is_active:
        return None
    now = timezone.now()
    if key.last_used_at is None or (now - key.last_used_at).total_seconds() >= (
        API_KEY_LAST_USED_RESOLUTION_S
    ):
        ApiKey.objects.filter(pk=key.pk).update(last_used_at=now)
    return key.user


def user_preference_set(
    *, user: AbstractBaseUser, reuse_cached_answers: bool
) -> UserPreference:
    """Store the user's gateway preferences (creates the row on first use); return it.

    ``reuse_cached_answers`` True opts the user's chat turns in to the answer caches
    (:mod:`gateway.cache`: identical or near-identical questions answered from their
    own earlier answers, even at temperature > 0). Idempotent.
    """
    preference, _ = UserPreference.objects.update_or_create(
        user_id=user.pk,
        defaults={
            "reuse_cached_answers": bool(reuse_cached_answers),
            "updated_at": timezone.now(),
        },
    )
    return preference
