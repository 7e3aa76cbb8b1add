"""Admit, enqueue and follow an API generation; settle its usage exactly once.

:func:`generation_start` reserves tokens and enqueues (or serves from the answer
caches); :func:`generation_relay` reads the generation's Redis stream and yields its
text, then an :class:`Outcome`; :func:`completion_stream` and
:func:`completion_collect` turn that into the streamed or the whole answer. A client
that leaves at any point has its job cancelled and settled (:func:`_abandon`).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser

from chatsite.db import db_brief
from chatsite.errors import DomainError, NotFound
from conversations.openai import chunks
from conversations.openai.errors import error_body, generation_failed
from conversations.openai.requests import CompletionRequest
from gateway import selectors as gateway_selectors
from gateway import services as gateway
from gateway.models import UsageRecord
from inference import client as inference_client
from inference import protocol
from inference.tokens import prompt_counter

READ_BLOCK_MS = 1000
# OpenAI's finish_reason for ours: a cancelled generation stopped where it was asked to.
_FINISH = {
    protocol.FINISH_STOP: "stop",
    protocol.FINISH_LENGTH: "length",
    protocol.FINISH_CANCELLED: "stop",
    protocol.FINISH_CONTENT_FILTER: "content_filter",
}
_STATUS = {
    protocol.FINISH_STOP: UsageRecord.Status.COMPLETE,
    protocol.FINISH_LENGTH: UsageRecord.Status.COMPLETE,
    protocol.FINISH_CANCELLED: UsageRecord.Status.CANCELLED,
    protocol.FINISH_CONTENT_FILTER: UsageRecord.Status.FILTERED,
}


@dataclass
class Started:
    """An admitted, enqueued API generation."""

    job_id: str
    user_id: int
    pool: str
    model: str
    enqueued_at: float
    created: int  # epoch seconds, the ``created`` of the completion
    cache_kind: str = ""  # "exact" / "semantic" when a cache answers, else ""


def _model_check(model: str) -> None:
    """With no pool in the database only the default pool's name is a model."""
    if not gateway_selectors.gateway_config().pools and (
        model != settings.INFERENCE_DEFAULT_POOL
    ):
        raise NotFound(
            f"The model “{model}” does not exist or is not available.",
            code="model_not_found",
        )


def prompt_tokens_reserve(messages: list[dict[str, str]]) -> int:
    """Return the prompt tokens to reserve for an API request.

    The count of the serving model's tokenizer and chat template (the one chat turns
    are built with, MEMORY_TOKENIZER_ENGINE; ~0.6 ms), never below the gateway's
    character estimate (a pool serving another model may tokenize differently).
    The template matters: SmolLM2's adds its own system prompt when a request has
    none, so "hi" is 31 prompt tokens where the estimate says 7.
    """
    count = prompt_counter(settings.MEMORY_TOKENIZER_ENGINE)(messages)
    return max(count, gateway.prompt_tokens_estimate(messages))


def generation_start(*, user: AbstractBaseUser, req: CompletionRequest) -> Started:
    """Admit (reserve tokens) and enqueue; nothing stays reserved if it raises.

    The answer caches (:mod:`gateway.cache`): at temperature 0 the exact cache (an
    identical request gets the identical answer); with ``cache`` true also at other
    temperatures, and then a single-turn prompt may use the semantic cache too (an API
    request carries no personal context: no memory is injected). The semantic cache is
    approximate and embedding the prompt costs ~13 ms of CPU, so temperature 0 alone
    does not use it. ``cache`` false: no cache at all. A hit is served by the gateway
    without a job. Raises the gateway's DomainErrors (NotFound, Forbidden,
    QuotaExceeded, PoolSaturated).
    """
    _model_check(req.model)
    job_id = str(uuid.uuid4())
    with gateway.reservation_guard(job_id=job_id):
        admission = gateway.generation_admit(
            user=user,
            job_id=job_id,
            messages=req.messages,
            prompt_tokens=prompt_tokens_reserve(req.messages),
            params=req.params,
            model=req.model,
            cache_policy=None
            if req.cache is False
            else gateway.CachePolicy(
                single_turn=True,
                personal=False,
                opt_in=bool(req.cache),
                semantic=bool(req.cache),
            ),
        )
        submission = gateway.generation_submit(
            job_id=job_id,
            messages=req.messages,
            params=admission.params,
            user_ref=str(user.pk),
            pool=admission.pool,
            cache_hit=admission.cache_hit,
        )
    return Started(
        job_id=job_id,
        user_id=user.pk,
        pool=admission.pool,
        model=admission.model or req.model,
        enqueued_at=submission.enqueued_at,
        created=int(submission.enqueued_at),
        cache_kind=admission.cache_hit.kind if admission.cache_hit else "",
    )


# --- the generation: relay, settle once, cancel on disconnect ------------------------


@dataclass
class Outcome:
    """How a generation ended: ``finish_reason`` (OpenAI's) or an error."""

    finish_reason: str = ""
    usage: protocol.Usage = field(default_factory=protocol.Usage)
    model: str = ""
    error: DomainError | None = None


def _settle(
    *,
    started: Started,
    event: protocol.Event,
    model: str,
    pool: str,
    answer: str | None = None,
) -> UsageRecord | None:
    """Record the generation's usage once; ``answer`` (the whole text) is offered to
    the answer caches, which keep it only if the request was cacheable and complete."""
    usage = protocol.Usage.from_dict(event.data.get("usage"))
    finish_reason = event.data.get("finish_reason", "")
    if event.type == protocol.EVENT_DONE:
        status = _STATUS[finish_reason]
        ttft, latency = event.data.get("ttft_ms"), event.data.get("latency_ms")
    else:
        status, ttft, latency = UsageRecord.Status.ERROR, None, None
    return gateway.usage_settle(
        user_id=started.user_id,
        job_id=started.job_id,
        status=status,
        usage=usage,
        pool=pool,
        model=model,
        ttft_ms=ttft,
        latency_ms=latency,
        cache_hit=bool(started.cache_kind),
        answer=answer,
        finish_reason=finish_reason,
    )


def _outcome(event: protocol.Event, model: str) -> Outcome:
    usage = protocol.Usage.from_dict(event.data.get("usage"))
    if event.type == protocol.EVENT_DONE:
        return Outcome(_FINISH[event.data["finish_reason"]], usage, model)
    error = generation_failed(
        code=event.data.get("code") or protocol.ERROR_ENGINE,
        message=event.data.get("message") or "The model failed while answering.",
    )
    return Outcome("", protocol.Usage(), model, error)


async def _abandon(
    *, started: Started, pool: str, model: str, after: str, tokens_seen: int
) -> None:
    """The client left: cancel the job, then settle it once from its terminal event.

    Waits up to API_CANCEL_SETTLE_WAIT_S seconds for the worker's terminal event (its
    exact usage); without one (the job was still queued) it settles what was relayed
    (``tokens_seen`` completion tokens, one per token event) as cancelled.
    """
    await sync_to_async(gateway.generation_cancel)(job_id=started.job_id)
    deadline = time.monotonic() + settings.API_CANCEL_SETTLE_WAIT_S
    while time.monotonic() < deadline:
        events = await inference_client.agen_read(
            job_id=started.job_id, after=after, block_ms=200
        )
        for event in events:
            after = event.id
            if event.type == protocol.EVENT_META:
                model = event.data.get("model") or model
            elif event.is_terminal:
                await db_brief(_settle)(
                    started=started, event=event, model=model, pool=pool
                )
                return
    await db_brief(gateway.usage_settle)(
        user_id=started.user_id,
        job_id=started.job_id,
        status=UsageRecord.Status.CANCELLED,
        usage=protocol.Usage(completion_tokens=tokens_seen),
        pool=pool,
        model=model,
    )


async def admission_abandon(
    admission: asyncio.Future[tuple[Started, CompletionRequest]],
) -> None:
    """The client left while its request was being admitted: wait for the admission
    step to end and, if it started a generation, cancel and settle it (:func:`_abandon`).
    """
    try:
        started, _req = await admission
    except Exception:  # rejected (DomainError) or failed: nothing was left running
        return
    await _abandon(
        started=started,
        pool=started.pool,
        model=started.model,
        after=protocol.STREAM_START,
        tokens_seen=0,
    )


async def generation_relay(started: Started) -> AsyncIterator[str | Outcome]:
    """Yield the answer's text deltas, then its :class:`Outcome` (usage settled).

    A generation that fails before its first token is retried on the fallback pool
    (gateway) and read again from its start. If the consumer stops early (client
    disconnect: CancelledError, or the generator is closed) the job is cancelled and
    settled by :func:`_abandon`.
    """
    after = protocol.STREAM_START
    pool, model = started.pool, started.model
    begun, tokens_seen, settled = False, 0, False
    parts: list[str] = []  # the answer, for the caches
    last_event_at = started.enqueued_at
    task = asyncio.current_task()
    try:
        while True:
            events = await inference_client.agen_read(
                job_id=started.job_id, after=after, block_ms=READ_BLOCK_MS
            )
            if task is not None and task.cancelling():
                # see conversations/sse.py: redis-py can absorb Django's CancelledError
                raise asyncio.CancelledError
            if not events:
                await sync_to_async(inference_client.generation_watchdog)(
                    job_id=started.job_id,
                    pool=pool,
                    enqueued_at=started.enqueued_at,
                    queue_timeout_s=settings.INFERENCE_QUEUE_TIMEOUT_S,
                    no_worker_grace_s=settings.INFERENCE_NO_WORKER_GRACE_S,
                    started=begun,
                    last_event_at=last_event_at,
                )
                continue
            begun, last_event_at, after = True, time.time(), events[-1].id
            for event in events:
                if event.type == protocol.EVENT_META:
                    model = event.data.get("model") or model
                elif event.type == protocol.EVENT_TOKEN:
                    tokens_seen += 1
                    parts.append(event.data["t"])
                    yield event.data["t"]
                elif event.is_terminal:
                    if event.type == protocol.EVENT_ERROR and not tokens_seen:
                        retried = await db_brief(gateway.generation_retry)(
                            job_id=started.job_id,
                            pool=pool,
                            error_code=event.data.get("code", ""),
                            terminal_id=event.id,
                        )
                        if retried:
                            pool, after, begun = retried, protocol.STREAM_START, False
                            break
                    await db_brief(_settle)(
                        started=started,
                        event=event,
                        model=model,
                        pool=pool,
                        answer="".join(parts),
                    )
                    settled = True
                    yield _outcome(event, model)
                    return
    finally:
        if not settled:
            await _abandon(
                started=started,
                pool=pool,
                model=model,
                after=after,
                tokens_seen=tokens_seen,
            )


async def completion_stream(
    started: Started, include_usage: bool
) -> AsyncIterator[str]:
    """Yield the SSE lines of a streamed completion: a role chunk, one chunk per text
    delta, the finish chunk, the usage chunk (``include_usage``), ``data: [DONE]``.
    A generation that fails after its first chunk ends with an error object instead.
    """
    cid = chunks.completion_id(started.job_id)

    def chunk(
        model: str, delta: dict[str, Any], finish: str | None = None
    ) -> dict[str, Any]:
        return chunks.chunk_json(
            cid=cid,
            created=started.created,
            model=model,
            delta=delta,
            finish_reason=finish,
            include_usage=include_usage,
        )

    model = started.model
    yield chunks.data_line(chunk(model, {"role": "assistant", "content": ""}))
    async with aclosing(generation_relay(started)) as relay:
        async for item in relay:
            if isinstance(item, str):
                yield chunks.data_line(chunk(model, {"content": item}))
                continue
            if item.error is not None:
                yield chunks.data_line(error_body(item.error))
                return
            model = item.model or model
            yield chunks.data_line(chunk(model, {}, item.finish_reason))
            if include_usage:
                yield chunks.data_line(
                    chunks.usage_chunk_json(
                        cid=cid, created=started.created, model=model, usage=item.usage
                    )
                )
            yield chunks.DONE_LINE


async def completion_collect(started: Started) -> dict[str, Any]:
    """Wait for the whole answer; return one ``chat.completion`` object.

    Raises the generation's error (:class:`~.errors.GenerationFailed`) if it failed.
    """
    parts: list[str] = []
    outcome = Outcome()
    async with aclosing(generation_relay(started)) as relay:
        async for item in relay:
            if isinstance(item, str):
                parts.append(item)
            else:
                outcome = item
    if outcome.error is not None:
        raise outcome.error
    return chunks.completion_json(
        cid=chunks.completion_id(started.job_id),
        created=started.created,
        model=outcome.model or started.model,
        content="".join(parts),
        finish_reason=outcome.finish_reason,
        usage=outcome.usage,
    )
