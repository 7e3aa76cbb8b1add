"""Celery tasks of the gateway (thin: each calls one service)."""

from celery import shared_task
from django.conf import settings

from gateway import cache, quota_sweep


@shared_task(name="gateway.tasks.prune_semantic_cache")
def prune_semantic_cache() -> int:
    """Delete semantic-cache entries older than GATEWAY_SEMANTIC_CACHE_TTL_S seconds."""
    return cache.semantic_cache_prune()


@shared_task(name="gateway.tasks.sweep_quota_reservations")
def sweep_quota_reservations() -> int:
    """Release the quota reservations left unsubmitted; return how many.

    Unsubmitted: not enqueued nor served from a cache within
    GATEWAY_RESERVATION_SUBMIT_TIMEOUT_S seconds of the reservation.
    """
    return quota_sweep.quota_reservations_sweep(
        older_than_s=settings.GATEWAY_RESERVATION_SUBMIT_TIMEOUT_S
    )
