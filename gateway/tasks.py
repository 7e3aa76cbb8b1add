"""Celery tasks of the gateway (thin: each calls one service)."""

from celery import shared_task

from gateway import cache


@shared_task(name="gateway.tasks.prune_semantic_cache")
def prune_semantic_cache() -> int:
    """Delete semantic-cache entries older than GATEWAY_SEMANTIC_CACHE_TTL_S seconds."""
    return cache.semantic_cache_prune()
