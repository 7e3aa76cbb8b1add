"""Answer caches of the gateway: exact (Redis) and semantic (pgvector) (issue #4).

Which requests use them. Only a *cacheable* request reads or fills a cache: a
deterministic one (``temperature`` 0) or one that opts in (the ``cache`` param set to
true; the gateway strips it before enqueueing). A cached answer replaces sampling, so a
request at temperature > 0 that did not opt in always gets a freshly sampled answer.

- Exact cache: the key is the SHA-256 of user, pool, the pool's model, the FULL rendered
  messages (system prompt and injected memory included) and the sampling parameters.
  Any difference in the prompt is a miss. Entries live GATEWAY_CACHE_TTL_S seconds.
- Semantic cache (:class:`gateway.models.SemanticCacheEntry`): only single-turn prompts
  with no personal context (no facts, document passages or summary injected); the user
  message is embedded with all-MiniLM-L6-v2 and a stored prompt of the same scope with
  cosine similarity >= GATEWAY_SEMANTIC_CACHE_MIN_SIMILARITY answers it. Scope: user,
  model, SHA-256 of the system prompt, SHA-256 of the sampling parameters.

Both caches are per user: user B never receives user A's answer, not even for an
identical prompt (an identical hit would tell B that someone sent that exact prompt, a
side channel on A's injected memory). There is no tenant model yet; a tenant scope would
replace ``user`` in the key and the filter.

The flow. At admission (:func:`gateway.services.generation_admit`) the gateway prepares
the request's cache material (:func:`cache_prepare`), looks it up on the routed pool
(:func:`cache_lookup`) and, on a miss, keeps the material of the admitted pool under
the job id (:func:`cache_pending_store`). On a hit nothing is enqueued: the gateway
writes the cached answer as the job's generation stream itself (:func:`cache_serve`:
``meta`` with ``"cache": kind``, ``token`` events in chunks, ``done``), so the SSE relay
and finalisation run unchanged. When a generation is settled
(:func:`gateway.services.usage_settle`), :func:`cache_settle` stores its answer if it is
complete (status ``complete``, finish reason ``stop`` or ``length``; never errors,
cancelled or filtered answers, never a cache hit itself) and drops the material.

Billing of a hit: usage counts the tokens an engine processed, and a hit processed none,
so its ``done`` event reports ``prompt_tokens = completion_tokens = cached_tokens = 0``;
the reservation is released, the :class:`UsageRecord` has ``cache_hit=True``, zero
tokens and cost 0, and the quota is not charged.

The Redis keys (exact entries, pending material) are listed in :mod:`gateway.keys`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import time
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone
from pgvector.django import CosineDistance

from gateway import keys
from gateway.models import SemanticCacheEntry
from inference import client as inference_client
from inference import protocol
from inference.connections import redis_sync
from inference.embeddings import embed_text

logger = logging.getLogger(__name__)

# The request param that opts a request in (any temperature); never sent to a worker.
CACHE_PARAM = "cache"
# Finish reasons of an answer worth caching (a complete answer, maybe cut by max_tokens).
CACHEABLE_FINISH = frozenset({protocol.FINISH_STOP, protocol.FINISH_LENGTH})
CACHE_WORKER = "cache"  # the ``worker`` of a cached answer's meta event


@dataclass(frozen=True)
class CachePolicy:
    """What the caller knows about a request that the caches need.

    ``single_turn``: the prompt holds no earlier turn of a conversation. ``personal``:
    personal context was injected (memory facts, document passages, a summary).
    ``opt_in``: the user accepts a cached answer at any temperature. ``lookup`` False
    (regenerate: the user wants a new answer) never serves from a cache; a complete
    answer is still stored and replaces the cached one. ``semantic`` False keeps the
    request to the exact cache (no embedding, no approximate answer).
    """

    single_turn: bool = False
    personal: bool = True
    opt_in: bool = False
    lookup: bool = True
    semantic: bool = True


@dataclass(frozen=True)
class CacheHit:
    """A cached answer: ``kind`` is ``exact`` or ``semantic``; ``model`` wrote it."""

    kind: str
    text: str
    model: str
    finish_reason: str
    similarity: float = 1.0  # cosine similarity of the prompts (exact: 1.0)


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


def _sha256(value: Any) -> str:
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


def params_hash(params: dict[str, Any]) -> str:
    """Return the SHA-256 of the sampling parameters (the opt-in flag excluded)."""
    return _sha256({k: v for k, v in params.items() if k != CACHE_PARAM})


def exact_digest(
    *,
    user_id: int,
    pool: str,
    model: str,
    messages: list[dict[str, str]],
    params: dict[str, Any],
) -> str:
    """Return the exact-cache digest of a request (SHA-256 hex; see module docstring)."""
    return _sha256(
        {
            "user": user_id,
            "pool": pool,
            "model": model,
            "messages": messages,
            "params": {k: v for k, v in params.items() if k != CACHE_PARAM},
        }
    )


def cache_prepare(
    *,
    user_id: int,
    messages: list[dict[str, str]],
    params: dict[str, Any],
    policy: CachePolicy,
) -> CacheMaterial | None:
    """Return a request's cache material, or None when it may not use the caches.

    ``params`` are the sampling parameters as they will be enqueued. For a request the
    semantic cache applies to, embeds the user message (all-MiniLM-L6-v2, ~10 ms CPU).
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
        system = "\n".join(m["content"] for m in messages if m["role"] == "system")
        material.semantic = True
        material.prompt = messages[-1]["content"]
        material.system_hash = _sha256(system)
        material.vector = embed_text(material.prompt)
    return material


def _exact_get(digest: str) -> CacheHit | None:
    raw = redis_sync().get(keys.cache_exact_key(digest))
    if raw is None:
        return None
    data = json.loads(raw)
    return CacheHit(
        kind=protocol.CACHE_EXACT,
        text=data["text"],
        model=data["model"],
        finish_reason=data["finish_reason"],
    )


def _semantic_get(material: CacheMaterial, model: str) -> CacheHit | None:
    cutoff = timezone.now() - timedelta(seconds=settings.GATEWAY_SEMANTIC_CACHE_TTL_S)
    with transaction.atomic():
        with connection.cursor() as cursor:
            # keep scanning the HNSW index until a row of this scope is found (the
            # scope filter runs after the index scan); strict: the first is the nearest
            cursor.execute("SET LOCAL hnsw.iterative_scan = strict_order")
        entry = (
            SemanticCacheEntry.objects.filter(
                user_id=material.user_id,
                model=model,
                system_hash=material.system_hash,
                params_hash=params_hash(material.params),
                created_at__gte=cutoff,
            )
            .annotate(distance=CosineDistance("embedding", material.vector))
            .defer("embedding")
            .order_by("distance")
            .first()
        )
        # read-only: roll back so the SET LOCAL ends with this block
        transaction.set_rollback(True)
    if entry is None:
        return None
    similarity = 1.0 - float(entry.distance)
    if similarity < settings.GATEWAY_SEMANTIC_CACHE_MIN_SIMILARITY:
        return None
    return CacheHit(
        kind=protocol.CACHE_SEMANTIC,
        text=entry.answer,
        model=entry.answer_model or entry.model,
        finish_reason=entry.finish_reason,
        similarity=similarity,
    )


def cache_lookup(*, material: CacheMaterial, pool: str, model: str) -> CacheHit | None:
    """Return a cached answer for the request on ``pool`` (serving ``model``), or None.

    Exact cache first, then the semantic cache when it applies. Never raises: a cache
    that fails (Redis, database) is logged and counts as a miss.
    """
    if not material.lookup:
        return None
    try:
        hit = _exact_get(
            exact_digest(
                user_id=material.user_id,
                pool=pool,
                model=model,
                messages=material.messages,
                params=material.params,
            )
        )
        if hit is None and material.semantic:
            hit = _semantic_get(material, model)
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
        keys.cache_pending_key(job_id), json.dumps(data), ex=settings.INFERENCE_STREAM_TTL_S
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
) -> bool:
    """Store a settled generation's answer in the caches if it qualifies; drop its material.

    Stored only when the request was admitted as cacheable, ``status`` is ``complete``,
    ``finish_reason`` is ``stop`` or ``length``, the answer is not empty, it is not a
    cache hit, and it was answered on the pool it was admitted to (a fallback retry is
    not cached). Returns True if stored. Never raises (a failure is logged).
    """
    try:
        client = redis_sync()
        raw = client.getdel(keys.cache_pending_key(job_id))
        if raw is None or cache_hit or not answer:
            return False
        if status != "complete" or finish_reason not in CACHEABLE_FINISH:
            return False
        data = json.loads(raw)
        if data["pool"] != pool:
            return False
        entry = {"text": answer, "model": answer_model, "finish_reason": finish_reason}
        client.set(
            keys.cache_exact_key(data["exact"]),
            json.dumps(entry, ensure_ascii=False),
            ex=settings.GATEWAY_CACHE_TTL_S,
        )
        semantic = data.get("semantic")
        if semantic:
            SemanticCacheEntry.objects.bulk_create(
                [
                    SemanticCacheEntry(
                        user_id=data["user_id"],
                        model=data["model"],
                        system_hash=semantic["system_hash"],
                        params_hash=semantic["params_hash"],
                        prompt_hash=_sha256(semantic["prompt"]),
                        prompt=semantic["prompt"],
                        embedding=semantic["vector"],
                        answer=answer,
                        answer_model=answer_model,
                        finish_reason=finish_reason,
                        created_at=timezone.now(),
                    )
                ],
                update_conflicts=True,
                unique_fields=[
                    "user",
                    "model",
                    "system_hash",
                    "params_hash",
                    "prompt_hash",
                ],
                update_fields=[
                    "prompt",
                    "embedding",
                    "answer",
                    "answer_model",
                    "finish_reason",
                    "created_at",
                ],
            )
        return True
    except Exception:
        logger.exception("cache store failed for job %s", job_id)
        return False


_WORD_RE = re.compile(r"\s*\S+|\s+$")


def answer_chunks(text: str, *, size: int) -> list[str]:
    """Split ``text`` into pieces of at most ``size`` characters, at word ends if possible.

    Joined, the pieces are ``text`` exactly; pieces are whole Unicode code points.
    """
    size = max(1, size)
    pieces: list[str] = []
    current = ""
    for word in _WORD_RE.findall(text):
        while len(word) > size:
            if current:
                pieces.append(current)
                current = ""
            pieces.append(word[:size])
            word = word[size:]
        if len(current) + len(word) > size:
            pieces.append(current)
            current = ""
        current += word
    if current:
        pieces.append(current)
    return pieces


def cache_serve(
    *, job_id: str, hit: CacheHit, enqueued_at: float | None = None
) -> None:
    """Write a cached answer as ``job_id``'s generation stream; nothing is enqueued.

    Events, as a worker writes them: ``meta`` (``worker`` "cache", ``queue_ms`` 0,
    ``cache`` = the hit's kind), the text as ``token`` events of at most
    GATEWAY_CACHE_CHUNK_CHARS characters, then ``done`` with the cached finish reason
    and zero usage (see the module docstring). ``ttft_ms`` and ``latency_ms`` are the
    milliseconds since ``enqueued_at`` (epoch s; None: 0).
    """
    client = redis_sync()
    key = protocol.gen_key(job_id)
    meta = {
        "model": hit.model,
        "worker": CACHE_WORKER,
        "queue_ms": 0,
        "cache": hit.kind,
    }
    with client.pipeline(transaction=True) as pipe:
        pipe.xadd(key, protocol.event_fields(protocol.EVENT_META, meta))
        for piece in answer_chunks(hit.text, size=settings.GATEWAY_CACHE_CHUNK_CHARS):
            pipe.xadd(key, protocol.token_fields(piece))
        pipe.execute()
    elapsed_ms = int(max(0.0, time.time() - enqueued_at) * 1000) if enqueued_at else 0
    inference_client.terminal_append(
        client,
        job_id=job_id,
        event_type=protocol.EVENT_DONE,
        payload={
            "finish_reason": hit.finish_reason,
            "usage": asdict(protocol.Usage()),
            "ttft_ms": elapsed_ms,
            "latency_ms": elapsed_ms,
        },
        ttl_s=settings.INFERENCE_STREAM_TTL_S,
    )


def semantic_cache_prune(*, now: Any = None) -> int:
    """Delete semantic-cache entries older than GATEWAY_SEMANTIC_CACHE_TTL_S; return count."""
    now = now or timezone.now()
    cutoff = now - timedelta(seconds=settings.GATEWAY_SEMANTIC_CACHE_TTL_S)
    deleted, _ = SemanticCacheEntry.objects.filter(created_at__lt=cutoff).delete()
    return deleted
