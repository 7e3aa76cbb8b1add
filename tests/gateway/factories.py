"""Factories for gateway rows (plans, pools, subscriptions)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from gateway.models import ModelPool, Plan, Subscription


def pool(name: str = "default", **fields: Any) -> ModelPool:
    """Create or update the pool ``name`` (the seeded `default` one may exist)."""
    defaults: dict[str, Any] = {
        "model": f"{name}-model",
        "engine": ModelPool.Engine.SCRIPTED,
        "max_context": 4096,
        "max_output_tokens": 1024,
        "price_input_per_1k": Decimal("0"),
        "price_output_per_1k": Decimal("0"),
        "queue_threshold": 32,
        "enabled": True,
        "fallback": None,
    }
    defaults.update(fields)
    obj, _ = ModelPool.objects.update_or_create(name=name, defaults=defaults)
    return obj


def plan(name: str = "test-plan", pools: list[ModelPool] | None = None, **fields: Any):
    """Create a plan allowed to use ``pools``."""
    obj = Plan.objects.create(name=name, **fields)
    if pools:
        obj.allowed_pools.set(pools)
    return obj


def subscribe(user: Any, to: Plan) -> Subscription:
    """Put ``user`` on plan ``to``."""
    sub, _ = Subscription.objects.update_or_create(user=user, defaults={"plan": to})
    return sub


def embedding_pool(name: str | None = None, **fields: Any) -> ModelPool:
    """Create or update an embedding pool (default: EMBEDDING_POOL, all-MiniLM-L6-v2,
    384-d), as migration 0006 seeds it but priced at 0.02 per 1,000 input tokens."""
    from django.conf import settings

    from inference.embedding_model import EMBEDDING_DIM, EMBEDDING_MAX_TOKENS

    defaults: dict[str, Any] = {
        "kind": ModelPool.Kind.EMBEDDING,
        "engine": ModelPool.Engine.SENTENCE_TRANSFORMERS,
        "model": "all-MiniLM-L6-v2",
        "dimensions": EMBEDDING_DIM,
        "max_context": EMBEDDING_MAX_TOKENS,
        "max_output_tokens": 0,
        "price_input_per_1k": Decimal("0.02"),
    }
    defaults.update(fields)
    return pool(name or settings.EMBEDDING_POOL, **defaults)
