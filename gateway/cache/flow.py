"""The caches in a request's life: look up at admission, keep the material of a miss,
store the answer when its generation is settled (see :mod:`gateway.cache`)."""

from __future__ import annotations

import json
import logging
from typing import Any

from django.conf import settings

from gateway.cache.exact import exact_digest, exact_get, exact_store
from gateway.cache.policy import CacheHit, CacheMaterial, params_hash
from gateway.cache.semantic import semantic_get, semantic_store
from inference import keys, protocol
from inference.connections import redis_sync

logger = logging.getLogger(__name__)

# Finish reasons of an answer worth caching (a complete answer, maybe cut by max_tokens).
CACHEABLE_FINISH = frozenset({protocol.FINISH_STOP, protocol.FINISH_LENGTH})


# cache_settle's ``pending`` when the caller did not take the material
_UNREAD = object()


def cache_pending_take(*, job_ids: list[str]) -> list[str | bytes | None]:
    """Take (GETDEL) the admitted material of many settled jobs in one pipelined
    round trip, for :func:`cache_settle`'s ``pending``; None where a job has none.
    Raises what Redis raises."""
    with redis_sync().pipeline(transaction=False) as pipe:
        for job_id in job_ids:
            pipe.getdel(keys.cache_pending_key(job_id))
        return list(pipe.execute())


def cache_lookup(*, material: CacheMaterial, pool: str, model: str) -> CacheHit | None:
    """Return a cached answer for the request on ``pool`` (serving ``model``), or None.

    Exact cache first, then the semantic cache when it applies. Never raises: a cache
    that fails (Redis, database) is logged and counts as a miss.
    """
    if not material.lookup:
        return None
    try:
        hit = exact_get(
            exact_digest(
                user_id=material.user_id,
                pool=pool,
                model=model,
                messages=material.messages,
                params=material.params,
            )
        )
        if hit is None and material.semantic:
            hit = semantic_get(material, model)
        return hit
    except Exception:
        logger.exception("cache lookup failed (served as a miss)")
        return None


def cache_pending_store(
    *, job_id: str, material: CacheMaterial, pool: str, model: str
) -> None:
    """Keep an admitted request's material under its job id until it is settled.

    ``pool``/``model`` are the admitted pool (after fallback) and its model; the answer
    is cached under them. Expires after INFERENCE_STREAM_TTL_S seconds.
    """
    data = {
        "user_id": material.user_id,
        "pool": pool,
        "model": model,
        "exact": exact_digest(
            user_id=material.user_id,
            pool=pool,
            model=model,
            messages=material.messages,
            params=material.params,
        ),
        "semantic": None,
    }
    if material.semantic:
        data["semantic"] = {
            "prompt": material.prompt,
            "system_hash": material.system_hash,
            "params_hash": params_hash(material.params),
            "vector": material.vector,
        }
    redis_sync().set(
        keys.cache_pending_key(job_id),
        json.dumps(data),
        ex=settings.INFERENCE_STREAM_TTL_S,
    )


def cache_settle(
    *,
    job_id: str,
    pool: str,
    status: str,
    finish_reason: str,
    answer: str | None,
    answer_model: str = "",
    cache_hit: bool = False,
    usage: protocol.Usage | None = None,
    pending: Any = _UNREAD,
) -> bool:
    """Store a settled generation's answer in the caches if it qualifies; drop its material.

    Stored only when the request was admitted as cacheable, ``status`` is ``complete``,
    ``finish_reason`` is ``stop`` or ``length``, the answer is not empty, it is not a
    cache hit, and it was answered on the pool it was admitted to (a fallback retry is
    not cached). ``usage``: the generation's, kept with both entries. Returns True
    if stored. Never raises (a failure is logged). ``pending``: the job's material as
    :func:`cache_pending_take` took it (default: taken here, one round trip).
    """
    try:
        raw = (
            redis_sync().getdel(keys.cache_pending_key(job_id))
            if pending is _UNREAD
            else pending
        )
        if raw is None or cache_hit or not answer:
            return False
        if status != "complete" or finish_reason not in CACHEABLE_FINISH:
            return False
        data = json.loads(raw)
        if data["pool"] != pool:
            return False
        exact_store(
            digest=data["exact"],
            answer=answer,
            answer_model=answer_model,
            finish_reason=finish_reason,
            user_id=data["user_id"],
            usage=usage,
        )
        if data.get("semantic"):
            semantic_store(
                user_id=data["user_id"],
                model=data["model"],
                material=data["semantic"],
                answer=answer,
                answer_model=answer_model,
                finish_reason=finish_reason,
                usage=usage,
            )
        return True
    except Exception:
        logger.exception("cache store failed for job %s", job_id)
        return False
