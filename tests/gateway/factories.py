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
