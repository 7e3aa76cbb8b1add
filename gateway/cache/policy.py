"""Which requests may use the answer caches, and the material their keys are made of.

A cached answer replaces sampling, so only a deterministic request (``temperature`` 0)
or one that opts in (the ``cache`` param) reads or fills a cache; the semantic cache
further needs a single-turn prompt with no personal context (see :mod:`gateway.cache`).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from inference.embeddings import TextVector

# The request param that opts a request in (any temperature); never sent to a worker.
CACHE_PARAM = "cache"


@dataclass(frozen=True)
class CachePolicy:
    """What the caller knows about a request that the caches need.

    ``single_turn``: the prompt holds no earlier turn of a conversation. ``personal``:
    personal context was injected (memory facts, document passages, a summary).
    ``opt_in``: the user accepts a cached answer at any temperature. ``lookup`` False
    (regenerate: the user wants a new answer) never serves from a cache; a complete
    answer is still stored and replaces the cached one. ``semantic`` False keeps the
    request to the exact cache (no embedding, no approximate answer). ``query`` is the
    user message's shared embedding, when the caller has one (a turn embeds its text
    once for moderation, memory and this cache).
    """

    single_turn: bool = False
    personal: bool = True
    opt_in: bool = False
    lookup: bool = True
    semantic: bool = True
    query: TextVector | None = None


@dataclass(frozen=True)
class CacheHit:
    """A cached answer: ``kind`` is ``exact`` or ``semantic``; ``model`` wrote it.

    ``prompt_tokens``/``completion_tokens``: the usage of the generation that wrote
    the answer, as its entry keeps it (0 where the entry does not know it).
    """

    kind: str
    text: str
    model: str
    finish_reason: str
    similarity: float = 1.0  # cosine similarity of the prompts (exact: 1.0)
    prompt_tokens: int = 0
    completion_tokens: int = 0


@dataclass
class CacheMaterial:
    """A cacheable request's key material (pool-independent parts).

    ``semantic`` is set when the semantic cache applies; then ``prompt`` is the user
    message, ``vector`` its 384-d unit embedding, ``system_hash`` the SHA-256 of the
    system prompt ("" hashed when there is none).
    """

    user_id: int
    messages: list[dict[str, str]]
    params: dict[str, Any]
    lookup: bool = True
    semantic: bool = False
    prompt: str = ""
    system_hash: str = ""
    vector: list[float] = field(default_factory=list)


def sha256_json(value: Any) -> str:
    """Return the SHA-256 hex of ``value``'s canonical JSON (sorted keys, no spaces)."""
    raw = json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(raw.encode()).hexdigest()


def request_cacheable(*, params: dict[str, Any], opt_in: bool = False) -> bool:
    """True if a request may use the caches: temperature 0, or the user opted in.

    A request without a ``temperature`` samples at the engine's default (not 0).
    """
    if opt_in:
        return True
    try:
        return float(params["temperature"]) == 0.0
    except (KeyError, TypeError, ValueError):
        return False


def single_turn(messages: list[dict[str, str]]) -> bool:
    """True if ``messages`` are system messages and exactly one user message, last."""
    roles = [m.get("role") for m in messages]
    return roles[-1:] == ["user"] and all(r == "system" for r in roles[:-1])


def sampling_params(params: dict[str, Any]) -> dict[str, Any]:
    """Return the sampling parameters that shape an answer (the opt-in flag dropped)."""
    return {k: v for k, v in params.items() if k != CACHE_PARAM}


def params_hash(params: dict[str, Any]) -> str:
    """Return the SHA-256 of the sampling parameters (the opt-in flag excluded)."""
    return sha256_json(sampling_params(params))


def cache_prepare(
    *,
    user_id: int,
    messages: list[dict[str, str]],
    params: dict[str, Any],
    policy: CachePolicy,
) -> CacheMaterial | None:
    """Return a request's cache material, or None when it may not use the caches.

    ``params`` are the sampling parameters as they will be enqueued. For a request the
    semantic cache applies to, the user message's vector comes from ``policy.query``
    (or is embedded on the embedding pool); without a vector (no embedding worker) the
    request keeps to the exact cache.
    """
    if not settings.GATEWAY_CACHE_ENABLED or not request_cacheable(
        params=params, opt_in=policy.opt_in
    ):
        return None
    material = CacheMaterial(
        user_id=user_id,
        messages=messages,
        params=dict(params),
        lookup=policy.lookup,
    )
    if (
        settings.GATEWAY_SEMANTIC_CACHE_ENABLED
        and policy.semantic
        and policy.single_turn
        and not policy.personal
        and single_turn(messages)
    ):
        prompt = messages[-1]["content"]
        query = policy.query
        if query is None or query.text != prompt:
            query = TextVector(prompt)
        vector = query.get()
        if vector is not None:
            system = "\n".join(m["content"] for m in messages if m["role"] == "system")
            material.semantic = True
            material.prompt = prompt
            material.system_hash = sha256_json(system)
            material.vector = vector
    return material
