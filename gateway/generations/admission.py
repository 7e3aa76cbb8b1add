"""Admission: route a request, reserve its worst-case tokens, consult the caches.

Runs before anything is stored or enqueued (DESIGN §4.2): refuse a suspended user
(:func:`safety.selectors.suspension_check`, 403), screen the user's message
(input moderation, :func:`safety.services.input_moderate`: a blocked request reserves,
looks up and enqueues nothing), route to a pool (plan,
explicit choice, difficulty), reserve the tokens atomically (:mod:`gateway.quota`),
look the answer up in the caches (:mod:`gateway.cache`), then admission control
(saturated pools fall back; all saturated: 503). A request that fails after admission
gives its reservation back (:func:`reservation_guard`); one whose process dies before
it is submitted is released by the periodic sweep (``quota_reservations_sweep``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.conf import settings

from gateway import cache, quota, routing, selectors
from gateway.cache import CacheHit
from gateway.generations.params_fit import (
    ContextOverflow,
    params_check,
    tools_fit,
)
from gateway.generations.reads import AdmissionReads
from gateway.generations.request import GenerationRequest
from inference.affinity import AffinityRead
from safety import selectors as safety_selectors
from safety import services as safety_services
from safety.models import ModerationEvent
from safety.windows import window_turns

# Where a request comes from, as moderation events record it (chat / api).
Surface = ModerationEvent.Surface


@dataclass
class Admission:
    """An admitted request: its pool and its reserved tokens.

    ``params`` are the sampling parameters to enqueue (``max_tokens`` capped at the
    pool's ``max_output_tokens``); ``reserved_tokens`` = prompt tokens + ``max_tokens``.
    With ``cache_hit`` the answer comes from a cache: nothing is reserved
    (``reserved_tokens`` 0) and the submission serves it instead of enqueueing a job.
    ``affinity``: the worker recorded for the conversation on the routed pool, read
    with the reservation (INFERENCE_AFFINITY; None: not read), for the submission's
    routing (:func:`inference.affinity.job_route`).
    """

    job_id: str
    pool: str
    model: str
    params: dict[str, Any]
    reserved_tokens: int
    cache_hit: CacheHit | None = None
    affinity: AffinityRead | None = None


def prompt_tokens_estimate(messages: list[dict[str, Any]]) -> int:
    """Return a deliberately high estimate of a prompt's tokens, for reservations only.

    ``ceil(characters / GATEWAY_CHARS_PER_TOKEN) + 4`` per message (tool calls'
    names and arguments count as characters) (the chat template's
    overhead) plus 2. Used when the caller has no count from the serving model's
    tokenizer; settlement corrects the reservation to the real count.
    """
    per_token = settings.GATEWAY_CHARS_PER_TOKEN
    return 2 + sum(4 + math.ceil(_message_chars(m) / per_token) for m in messages)


def _message_chars(message: dict[str, Any]) -> int:
    """The characters of a message's content and of its tool calls (name and
    arguments)."""
    calls = message.get("tool_calls") or ()
    return len(str(message.get("content") or "")) + sum(
        len(c["function"]["name"]) + len(c["function"]["arguments"]) for c in calls
    )


def tools_involved(*, messages: list[dict[str, Any]]) -> bool:
    """True when a request carries a tool exchange (an assistant message with
    ``tool_calls`` or a ``tool`` message): the answer caches are neither read nor
    filled for it.

    A request that only offers ``tools`` may use them: the offered tools are part of
    the sampling parameters both keys hash (:func:`gateway.cache.policy.params_hash`),
    so it only meets answers made with the same offer, and only a plain answer
    (``stop``/``length``) is ever stored, never a call.
    """
    return any(m.get("role") == "tool" or m.get("tool_calls") for m in messages)


def client_texts(
    *, messages: list[dict[str, Any]], params: dict[str, Any]
) -> list[dict[str, Any]]:
    """Return ``messages`` plus, as messages of their own, the other client-written
    text that reaches the prompt: each assistant call's ``arguments`` and a ``tool``
    message's ``name`` (role ``assistant``), each offered tool's ``description``
    (role ``system``). Input moderation screens all of it like a message; none of it
    is a user turn, so the window of user turns is unchanged.
    """
    extra: list[dict[str, Any]] = []
    for message in messages:
        for call in message.get("tool_calls") or ():
            arguments = (call.get("function") or {}).get("arguments")
            if isinstance(arguments, str):
                extra.append({"role": "assistant", "content": arguments})
        if message.get("role") == "tool" and isinstance(message.get("name"), str):
            extra.append({"role": "assistant", "content": message["name"]})
    for tool in params.get("tools") or ():
        description = (tool.get("function") or {}).get("description")
        if isinstance(description, str):
            extra.append({"role": "system", "content": description})
    return [*messages, *extra] if extra else messages


def last_user_text(messages: list[dict[str, str]]) -> str:
    """The content of the last ``user`` message of ``messages`` ("" if none)."""
    for message in reversed(messages):
        if message.get("role") == "user":
            return str(message.get("content") or "")
    return ""


def input_check(request: GenerationRequest, *, job_id: str) -> None:
    """Moderate the user's text of ``request`` (SAFETY_INPUT_ENABLED; off: no-op).

    ``request.client_authored`` (the API): the client wrote every message (system
    prompt and earlier turns too), so every one is screened
    (:func:`safety.services.messages_moderate`, one batch, unchanged history served
    from the verdict cache). Otherwise (the chat turn, whose history was screened
    when it was sent) the text is ``request.query.text`` (the turn's own message,
    whose shared vector the classifier reads) or else the last user message, judged
    alone and with the prompt's previous user turns (the last SAFETY_WINDOW_TURNS
    joined, :func:`safety.windows.window_judge`: a request split over messages).
    ``job_id`` is what a moderation event refers to.
    Raises ModerationBlocked (400) or, failing closed, ModerationUnavailable (503).
    """
    if not settings.SAFETY_INPUT_ENABLED:
        return
    query = request.query
    if request.client_authored:
        safety_services.messages_moderate(
            user=request.user,
            messages=client_texts(messages=request.messages, params=request.params),
            surface=request.surface,
            query=query,
            job_id=job_id,
        )
        return
    text = query.text if query is not None else last_user_text(request.messages)
    if not text.strip():
        return
    safety_services.input_moderate(
        user=request.user,
        text=text,
        query=query,
        surface=request.surface,
        conversation_id=request.conversation_id,
        message_id=request.message_id,
        job_id=job_id,
        window=window_turns(request.messages, turns=settings.SAFETY_WINDOW_TURNS),
    )


def generation_admit(request: GenerationRequest, *, job_id: str) -> Admission:
    """Moderate, route, reserve quota and admit ``request`` as job ``job_id``; call
    before storing anything (the fields are described on :class:`GenerationRequest`).

    First the user's text is moderated (:func:`input_check`): a blocked request
    raises before anything below runs. Then the plan's routing picks a pool (or
    ``request.model``), the prompt is checked against its window
    (``context_tokens``), and ``prompt_tokens`` (else :func:`prompt_tokens_estimate`)
    + ``max_tokens`` are reserved; a reservation below the real prompt would let
    concurrent requests spend past a limit. With a ``cache_policy`` the routed pool's
    caches are looked up after the reservation; on a hit the reservation is released
    and the admission carries ``cache_hit`` (a saturated pool does not matter then).
    ``params["cache"]`` true opts in to cached answers (it is never enqueued).
    ``fallback`` False: a saturated pool is refused rather than replaced.

    Raises Suspended (403 ``account_suspended``, checked before anything else),
    ModerationBlocked (400, the content policy; an event is recorded, nothing
    reserved), ModerationUnavailable (503, moderation down and failing closed),
    ContextOverflow (400, the prompt alone fills the pool's context window, or, with
    ``max_tokens_strict``, leaves no room for the asked ``max_tokens``),
    UnsupportedParameter (400, a parameter the pool's engine does not implement, or,
    with ``max_tokens_strict``, a ``max_tokens`` over the pool's limit), NotFound /
    Forbidden (model choice), QuotaExceeded (429, nothing reserved; code
    ``rate_limit_requests`` when ``request.request_count`` is over its requests per
    minute), PoolSaturated (503, the reservation is given back). On success the
    caller owns the reservation: it ends in settlement, :func:`generation_release`,
    or the sweep.
    """
    user, messages = request.user, request.messages
    safety_selectors.suspension_check(user=user)
    counter = request.request_count
    if counter is not None and settings.SAFETY_INPUT_ENABLED:
        counter.count()  # a request over its limit is not screened (no event)
    input_check(request, job_id=job_id)
    plan = selectors.plan_for_user(user=user)
    pool = routing.pool_choose(plan=plan, messages=messages, requested=request.model)
    context_tokens = request.context_tokens
    if context_tokens is not None and context_tokens >= pool.max_context:
        raise ContextOverflow.for_prompt(
            prompt_tokens=context_tokens, window=pool.max_context
        )
    params = dict(request.params)
    opt_in = bool(params.pop(cache.CACHE_PARAM, False))
    tools_fit(pool=pool, params=params, optional=request.tools_optional)
    params_check(
        pool=pool,
        params=params,
        strict=request.max_tokens_strict,
        context_tokens=context_tokens or 0,
    )
    max_tokens = int(params.get("max_tokens") or settings.CHAT_MAX_TOKENS)
    params["max_tokens"] = max(1, min(max_tokens, pool.max_output_tokens))
    prompt_tokens = request.prompt_tokens
    if prompt_tokens is None:
        prompt_tokens = prompt_tokens_estimate(messages)
    reserved = prompt_tokens + params["max_tokens"]
    # the pool's load and the conversation's worker come with the reservation
    reads = AdmissionReads(pool=pool.name, user_id=user.pk, messages=messages)
    quota.quota_reserve(
        user_id=user.pk,
        job_id=job_id,
        tokens=reserved,
        limits=selectors.plan_limits(plan=plan),
        # absent counters (new period, lost Redis) are seeded in the same round trip's
        # miss path, so a restart does not reset a budget already spent
        seed=lambda windows: quota_windows_seed(user_id=user.pk, windows=windows),
        count=counter,
        piggyback=reads.piggyback,
    )
    material = None
    cache_policy = request.cache_policy
    if tools_involved(messages=messages):
        cache_policy = None  # a cached plain answer never answers a tool exchange
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
            quota.quota_release(user_id=user.pk, job_id=job_id)
            return Admission(
                job_id=job_id,
                pool=pool.name,
                model=pool.model,
                params=params,
                reserved_tokens=0,
                cache_hit=hit,
            )
        pool = routing.pool_admit(
            pool=pool, plan=plan, fallback=request.fallback, load=reads.load()
        )
        # a fallback pool must honour the parameters too (its limit lowers max_tokens)
        tools_fit(pool=pool, params=params, optional=request.tools_optional)
        params_check(pool=pool, params=params, strict=False)
        params["max_tokens"] = min(params["max_tokens"], pool.max_output_tokens)
        if material is not None:
            material.params = dict(params)
            cache.cache_pending_store(
                job_id=job_id, material=material, pool=pool.name, model=pool.model
            )
    except BaseException:
        quota.quota_release(user_id=user.pk, job_id=job_id)
        raise
    return Admission(
        job_id=job_id,
        pool=pool.name,
        model=pool.model,
        params=params,
        reserved_tokens=reserved,
        affinity=reads.affinity(),
    )


def quota_seed_from_records(*, user_id: int) -> None:
    """Seed absent day/month counters from the usage records (new period, lost Redis).

    Call before every reservation (chat and embeddings alike), so a restart of Redis
    or a new period does not reset a budget already spent.
    """
    quota_windows_seed(user_id=user_id, windows=quota.quota_unseeded(user_id=user_id))


def quota_windows_seed(*, user_id: int, windows: list[quota.Window]) -> None:
    """Seed the user's absent day/month ``windows`` from the usage records (SET NX:
    a counter another request seeded meanwhile is kept)."""
    for window in windows:
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


def generation_release(*, user_id: int, job_id: str) -> None:
    """Give back the whole reservation of ``user_id``'s job (idempotent; no-op if
    already settled)."""
    quota.quota_release(user_id=user_id, job_id=job_id)


@contextmanager
def reservation_guard(*, user_id: int, job_id: str) -> Iterator[None]:
    """Release the reservation of ``user_id``'s ``job_id`` if the block raises (no-op if none was made).

    Wraps admission, storing and submission, so a request that fails after
    :func:`generation_admit` (a conflict, a database error) consumes nothing.
    """
    try:
        yield
    except BaseException:
        generation_release(user_id=user_id, job_id=job_id)
        raise
