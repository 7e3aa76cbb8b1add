"""The exact answer cache (Redis): a hit needs the very same request.

The key is the SHA-256 of user, pool, the pool's model, the FULL rendered messages
(system prompt and injected memory included) and the sampling parameters, so any
difference in the prompt is a miss. Entries live GATEWAY_CACHE_TTL_S seconds.
"""

from __future__ import annotations

import json
from typing import Any

from django.conf import settings

from gateway.cache.policy import CacheHit, sampling_params, sha256_json
from inference import keys, protocol
from inference.connections import redis_sync


def exact_digest(
    *,
    user_id: int,
    pool: str,
    model: str,
    messages: list[dict[str, str]],
    params: dict[str, Any],
) -> str:
    """Return the exact-cache digest of a request (SHA-256 hex; see module docstring)."""
    return sha256_json(
        {
            "user": user_id,
            "pool": pool,
            "model": model,
            "messages": messages,
            "params": sampling_params(params),
        }
    )


def exact_get(digest: str) -> CacheHit | None:
    """Return the answer cached under ``digest`` (:func:`exact_digest`), or None."""
    raw = redis_sync().get(keys.cache_exact_key(digest))
    if raw is None:
        return None
    data = json.loads(raw)
    return CacheHit(
        kind=protocol.CACHE_EXACT,
        text=data["text"],
        model=data["model"],
        finish_reason=data["finish_reason"],
        prompt_tokens=int(data.get("prompt_tokens", 0)),
        completion_tokens=int(data.get("completion_tokens", 0)),
    )


def exact_store(
    *,
    digest: str,
    answer: str,
    answer_model: str,
    finish_reason: str,
    user_id: int | None = None,
    usage: protocol.Usage | None = None,
) -> None:
    """Cache ``answer`` (written by ``answer_model``) under ``digest`` for
    GATEWAY_CACHE_TTL_S seconds, replacing an earlier one, with the ``usage`` of the
    generation that wrote it (a hit reports it: :func:`gateway.cache.cache_serve`).

    ``user_id``, the owner, is stored in the entry so that deleting an account can find
    its entries (:func:`accounts.services.account_redis_purge`); lookups ignore it.
    """
    entry: dict[str, Any] = {
        "text": answer,
        "model": answer_model,
        "finish_reason": finish_reason,
        "prompt_tokens": usage.prompt_tokens if usage else 0,
        "completion_tokens": usage.completion_tokens if usage else 0,
    }
    if user_id is not None:
        entry["user"] = user_id
    redis_sync().set(
        keys.cache_exact_key(digest),
        json.dumps(entry, ensure_ascii=False),
        ex=settings.GATEWAY_CACHE_TTL_S,
    )
