"""The semantic answer cache (pgvector, :class:`gateway.models.SemanticCacheEntry`).

Only single-turn prompts with no personal context use it. The user message is embedded
with all-MiniLM-L6-v2, and a stored prompt of the same scope (user, model, SHA-256 of
the system prompt, SHA-256 of the sampling parameters) with cosine similarity >=
GATEWAY_SEMANTIC_CACHE_MIN_SIMILARITY answers it. Entries older than
GATEWAY_SEMANTIC_CACHE_TTL_S are not served, and a beat task deletes them.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone
from pgvector.django import CosineDistance

from gateway.cache.policy import CacheHit, CacheMaterial, params_hash, sha256_json
from gateway.models import SemanticCacheEntry
from inference import protocol


def semantic_get(material: CacheMaterial, model: str) -> CacheHit | None:
    """Return the nearest cached answer of ``material``'s scope on ``model`` if it is
    similar enough (GATEWAY_SEMANTIC_CACHE_MIN_SIMILARITY), else None."""
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
        prompt_tokens=entry.prompt_tokens,
        completion_tokens=entry.completion_tokens,
    )


def semantic_store(
    *,
    user_id: int,
    model: str,
    material: dict[str, Any],
    answer: str,
    answer_model: str,
    finish_reason: str,
    usage: protocol.Usage | None = None,
) -> None:
    """Store ``answer`` for a prompt, replacing the entry of the same prompt and scope.

    ``material`` is the stored semantic material of the request: ``prompt``,
    ``system_hash``, ``params_hash`` and ``vector`` (384 floats). ``usage``: the
    generation's that wrote the answer, which a hit reports (None: zeros).
    """
    SemanticCacheEntry.objects.bulk_create(
        [
            SemanticCacheEntry(
                user_id=user_id,
                model=model,
                system_hash=material["system_hash"],
                params_hash=material["params_hash"],
                prompt_hash=sha256_json(material["prompt"]),
                prompt=material["prompt"],
                embedding=material["vector"],
                answer=answer,
                answer_model=answer_model,
                finish_reason=finish_reason,
                prompt_tokens=usage.prompt_tokens if usage else 0,
                completion_tokens=usage.completion_tokens if usage else 0,
                created_at=timezone.now(),
            )
        ],
        update_conflicts=True,
        unique_fields=["user", "model", "system_hash", "params_hash", "prompt_hash"],
        update_fields=[
            "prompt",
            "embedding",
            "answer",
            "answer_model",
            "finish_reason",
            "prompt_tokens",
            "completion_tokens",
            "created_at",
        ],
    )


def semantic_cache_prune(*, now: datetime | None = None) -> int:
    """Delete semantic-cache entries older than GATEWAY_SEMANTIC_CACHE_TTL_S; return count."""
    now = now or timezone.now()
    cutoff = now - timedelta(seconds=settings.GATEWAY_SEMANTIC_CACHE_TTL_S)
    deleted, _ = SemanticCacheEntry.objects.filter(created_at__lt=cutoff).delete()
    return deleted
