"""Embeddings for API users: the gateway's policy around the inference tier's vectors.

An embeddings request follows the rules of a chat generation (DESIGN §4.2), with one
answer instead of a stream:

1. route (:func:`gateway.routing.embedding_pool_choose`): the embedding pool named by
   the request (pool or model name) that the user's plan allows; a chat model is a 400;
2. reserve: the inputs' estimated tokens (:func:`embedding_tokens_estimate`) in every
   quota window, atomically (:mod:`gateway.quota`; 429 when a window has no room);
3. embed: one job on the pool (:func:`inference.embeddings.aembed_texts`), awaited
   without blocking the event loop;
4. settle once (:func:`gateway.generations.settle.usage_settle`): a UsageRecord (prompt
   tokens = the tokens the model read, no completion tokens, cost at the pool's input
   price) and the reservation replaced by that usage, so quotas, usage records and
   the admin's usage report count embeddings like chat.

Steps 1-2 are sync (:func:`embedding_admit`: the database and Redis), 3-4 async
(:func:`embedding_create`), so an async view holds no thread or database connection
while the vectors are computed. Whatever ends a request between 2 and 4 gives its
reservation back: no live worker or no answer in time (ServiceUnavailable, 503 with
``Retry-After``), a client that disconnects (the CancelledError is re-raised). A web
process that dies meanwhile leaves an unsubmitted reservation that the periodic sweep
releases (``quota_reservations_sweep``); the wait is capped below that sweep's age.
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass

from asgiref.sync import sync_to_async
from django.conf import settings
from django.contrib.auth.models import User

from chatsite.db import db_brief
from chatsite.errors import InvalidInput, ServiceUnavailable
from gateway import quota, routing, selectors
from gateway.generations.admission import quota_seed_from_records
from gateway.generations.settle import usage_settle
from gateway.models import ModelPool, UsageRecord
from inference import embedding_model, liveness, protocol
from inference import embeddings as inference_embeddings
from inference.embeddings import EMBEDDING_DIM, Embeddings, EmbeddingUnavailable
from safety import selectors as safety_selectors


class DimensionsUnsupported(InvalidInput):
    """The request asked for vectors of another length than the pool serves (400).

    Our models do not shorten their vectors (no Matryoshka truncation), so
    ``dimensions`` is accepted only when it equals the pool's dimension.
    """

    code = "dimensions_unsupported"
    param = "dimensions"


@dataclass
class EmbeddingAdmission:
    """An admitted embeddings request: its pool and its reservation.

    ``job_id`` names the reservation and the usage record; ``model`` is the pool's
    model name (what the response and the usage report show); ``dimensions`` the
    length of every vector it returns; ``reserved_tokens`` the tokens reserved;
    ``admitted_at`` epoch seconds.
    """

    job_id: str
    user_id: int
    pool: str
    model: str
    dimensions: int
    reserved_tokens: int
    admitted_at: float


def embedding_tokens_estimate(*, texts: list[str], max_tokens_per_input: int) -> int:
    """Return the tokens to reserve for embedding ``texts`` (a high estimate).

    Per text ``ceil(characters / GATEWAY_CHARS_PER_TOKEN) + 2`` (the model's two
    special tokens), at most ``max_tokens_per_input`` (the pool's ``max_context``:
    the model cuts longer inputs, 256 word pieces for all-MiniLM-L6-v2). Settlement
    replaces it with the tokens the model read.
    """
    per_token = settings.GATEWAY_CHARS_PER_TOKEN
    cap = max(1, max_tokens_per_input)
    return sum(min(cap, 2 + math.ceil(len(text) / per_token)) for text in texts)


def _timeout_s() -> float:
    """How long a request waits for its vectors (s): API_EMBEDDING_TIMEOUT_S, at most
    half GATEWAY_RESERVATION_SUBMIT_TIMEOUT_S, so its reservation (listed as
    unsubmitted until settled) is never swept while it waits."""
    return min(
        settings.API_EMBEDDING_TIMEOUT_S,
        settings.GATEWAY_RESERVATION_SUBMIT_TIMEOUT_S / 2,
    )


def _unavailable(
    *, model: str, code: str, detail: str = "", timeout_s: float = 0.0
) -> ServiceUnavailable:
    """The 503 for an embedding pool that could not answer (``code``: one of
    :mod:`inference.embeddings`' codes), with ``Retry-After``."""
    retry = settings.GATEWAY_SATURATED_RETRY_AFTER_S
    later = f"Please try again in about {retry} seconds."
    retryable = True
    if code == inference_embeddings.NO_WORKER:
        message = f"No worker is serving the embedding model “{model}” right now. "
    elif code == inference_embeddings.TIMEOUT:
        message = (
            f"The embedding model “{model}” did not answer within {timeout_s:g} s "
            "(it is busy). Send fewer inputs at once, or try again later. "
        )
    elif code == inference_embeddings.DIMENSION_MISMATCH:
        message, later, retryable = detail, "", False
    else:
        message = f"The embedding model “{model}” failed on this request. "
    return ServiceUnavailable(
        (message + later).strip(),
        code=code,
        retryable=retryable,
        headers={"Retry-After": str(retry)},
    )


class InputTooLong(InvalidInput):
    """An input is longer than the embedding model reads (400): the model would embed
    only its beginning, so it is refused rather than silently cut."""

    code = "input_too_long"
    param = "input"


def input_length_check(*, pool: ModelPool, texts: list[str]) -> None:
    """Refuse a text longer than ``pool``'s model reads, in the model's word pieces.

    Counted on the web tier with the model's own tokenizer for pools of the
    ``sentence-transformers`` engine (all-MiniLM-L6-v2: at most
    :data:`~inference.embedding_model.EMBEDDING_MAX_TOKENS` = 256, special tokens included,
    and at most the pool's ``max_context``); other engines count on their server.
    Raises InputTooLong naming the first such text, its length and the limit.
    """
    if pool.engine != ModelPool.Engine.SENTENCE_TRANSFORMERS:
        return
    limit = min(pool.max_context, embedding_model.EMBEDDING_MAX_TOKENS)
    counts = embedding_model.embedding_token_counts(texts)
    for i, count in enumerate(counts):
        if count > limit:
            where = "`input`" if len(texts) == 1 else f"input[{i}]"
            raise InputTooLong(
                f"{where} is {count:,} tokens long; the model “{pool.model}” reads "
                f"at most {limit:,} tokens per input. Split the text and embed the "
                "parts."
            )


def embedding_admit(
    *,
    user: User,
    texts: list[str],
    model: str,
    dimensions: int | None = None,
) -> EmbeddingAdmission:
    """Route an embeddings request and reserve its tokens (sync: database and Redis).

    ``texts``: the inputs (validated at the edge: non-empty strings); ``model``: a
    pool or model name; ``dimensions``: the vector length asked for (None: the
    pool's). Raises Suspended (403, checked first), WrongModelKind (400, a chat model), NotFound (404), Forbidden
    (403, not in the plan), DimensionsUnsupported (400), ServiceUnavailable (503, no
    live worker on the pool; nothing reserved), InputTooLong (400, a text over the
    model's input limit), QuotaExceeded (429, nothing reserved).
    On success the caller owns the reservation: :func:`embedding_create` settles or
    releases it (else the periodic sweep does).
    """
    safety_selectors.suspension_check(user=user)
    plan = selectors.plan_for_user(user=user)
    pool = routing.embedding_pool_choose(plan=plan, requested=model)
    served = pool.dimensions or EMBEDDING_DIM
    if dimensions is not None and dimensions != served:
        raise DimensionsUnsupported(
            f"The model “{pool.model}” makes {served}-d vectors and cannot shorten "
            f"them: omit `dimensions`, or set it to {served}."
        )
    input_length_check(pool=pool, texts=texts)
    if liveness.workers_live(pool=pool.name) == 0:
        raise _unavailable(model=pool.model, code=inference_embeddings.NO_WORKER)
    job_id = protocol.new_job_id()
    reserved = embedding_tokens_estimate(
        texts=texts, max_tokens_per_input=pool.max_context
    )
    quota_seed_from_records(user_id=user.pk)
    quota.quota_reserve(
        user_id=user.pk,
        job_id=job_id,
        tokens=reserved,
        limits=selectors.plan_limits(plan=plan),
        advice=quota.SHRINK_ADVICE_EMBEDDINGS,
    )
    return EmbeddingAdmission(
        job_id=job_id,
        user_id=user.pk,
        pool=pool.name,
        model=pool.model,
        dimensions=served,
        reserved_tokens=reserved,
        admitted_at=time.time(),
    )


def embedding_release(*, admission: EmbeddingAdmission) -> None:
    """Give back an admitted request's whole reservation (idempotent; a no-op once
    it was settled)."""
    quota.quota_release(user_id=admission.user_id, job_id=admission.job_id)


def embedding_settle(
    *, admission: EmbeddingAdmission, result: Embeddings
) -> UsageRecord | None:
    """Record an answered request once and settle its reservation (sync).

    The UsageRecord holds ``result.tokens`` (the tokens the model read) as prompt
    tokens, no completion tokens, and costs them at the pool's
    ``price_input_per_1k``. Returns the record, or None if the request was already
    settled.
    """
    return usage_settle(
        user_id=admission.user_id,
        job_id=admission.job_id,
        status=UsageRecord.Status.COMPLETE,
        usage=protocol.Usage(prompt_tokens=result.tokens),
        pool=admission.pool,
        model=admission.model,
        latency_ms=int((time.time() - admission.admitted_at) * 1000),
    )


async def embedding_create(
    *, admission: EmbeddingAdmission, texts: list[str]
) -> Embeddings:
    """Embed ``texts`` on the admitted pool, then settle the request once (async).

    Returns one vector of ``admission.dimensions`` floats per text, in order, and
    the tokens the model read. Waits at most API_EMBEDDING_TIMEOUT_S seconds (see
    :func:`_timeout_s`). Raises ServiceUnavailable (503, ``Retry-After``) when no
    worker is live or none answers in time, the reservation given back; a
    cancellation (the client left) gives it back too and is re-raised.
    """
    timeout_s = _timeout_s()
    try:
        result = await inference_embeddings.aembed_texts(
            texts,
            pool=admission.pool,
            timeout_s=timeout_s,
            user_ref=str(admission.user_id),
            # a large request is bulk work: it must not hold up the chat's questions
            bulk=len(texts) > settings.EMBEDDING_JOB_MAX_TEXTS,
        )
    except BaseException as exc:
        # shielded: a second cancellation cannot stop the release half-way
        release = sync_to_async(embedding_release, thread_sensitive=False)
        await asyncio.shield(release(admission=admission))
        if isinstance(exc, EmbeddingUnavailable):
            raise _unavailable(
                model=admission.model,
                code=exc.code,
                detail=str(exc),
                timeout_s=timeout_s,
            ) from exc
        raise
    await db_brief(embedding_settle)(admission=admission, result=result)
    return result
