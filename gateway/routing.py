"""Routing and admission: which pool answers a request, and whether it can take it now.

Routing (:func:`pool_choose`), in order:
1. an explicit model choice (a pool name or model name), if the user's plan allows it;
2. the plan tier: the plan's allowed pools (none listed = every enabled pool);
3. a difficulty heuristic: a short, simple prompt goes to the cheapest allowed pool,
   anything else to the most capable one (largest context, then highest price).

Admission (:func:`pool_admit`): a pool with no live worker, or with more waiting jobs
than its ``queue_threshold``, is saturated and the request follows its ``fallback`` chain;
when every pool of the chain is saturated the request is refused (503, ``Retry-After``).
Under pressure the lowest-priority plan is shed first: its requests see a threshold of
``queue_threshold * GATEWAY_SHED_FRACTION``.
"""

from __future__ import annotations

from decimal import Decimal

from django.conf import settings
from redis.exceptions import ResponseError

from chatsite.errors import Forbidden, NotFound, PoolSaturated
from gateway import selectors
from gateway.models import ModelPool, Plan
from inference import client as inference_client
from inference import protocol
from inference.connections import redis_sync


def prompt_is_simple(messages: list[dict[str, str]]) -> bool:
    """True for a short, simple last user message.

    Short: at most GATEWAY_SIMPLE_MAX_CHARS characters and 3 lines; simple: no code
    fence. A rule of thumb (DESIGN §4 step 2), tuned by those two settings.
    """
    last = next((m for m in reversed(messages) if m.get("role") == "user"), None)
    text = str(last.get("content", "")) if last else ""
    return (
        len(text) <= settings.GATEWAY_SIMPLE_MAX_CHARS
        and text.count("\n") < 3
        and "```" not in text
    )


def _price(pool: ModelPool) -> Decimal:
    return pool.price_input_per_1k + pool.price_output_per_1k


def pool_choose(
    *, plan: Plan, messages: list[dict[str, str]], requested: str | None = None
) -> ModelPool:
    """Return the pool a request should go to (before admission).

    ``requested`` is a pool name or model name. Raises NotFound (no such enabled model),
    Forbidden (the plan does not include it, or includes no enabled pool).
    """
    config = selectors.gateway_config()
    if not config.pools:
        return selectors.pool_default()
    enabled = [p for p in config.pools.values() if p.enabled]
    allowed = selectors.plan_pools(plan=plan)
    if requested:
        wanted = [p for p in enabled if requested in (p.name, p.model)]
        if not wanted:
            raise NotFound(
                f"The model “{requested}” does not exist or is not available.",
                code="model_not_found",
            )
        for pool in wanted:
            if pool in allowed:
                return pool
        raise Forbidden(
            f"Your plan ({plan.name}) does not include the model “{requested}”.",
            code="model_not_allowed",
        )
    if not allowed:
        raise Forbidden(
            f"Your plan ({plan.name}) includes no model that is available now.",
            code="no_model_for_plan",
        )
    if prompt_is_simple(messages):
        return min(allowed, key=lambda p: (_price(p), p.max_context, p.name))
    return max(allowed, key=lambda p: (p.max_context, _price(p), p.name))


def queue_waiting(*, pool: str) -> int:
    """Return how many jobs wait in ``pool``'s queue, not yet taken by a worker."""
    client = redis_sync()
    key = protocol.queue_key(pool)
    try:
        groups = client.xinfo_groups(key)
    except ResponseError:  # no stream yet
        return 0
    group = next((g for g in groups if g.get("name") == protocol.GROUP), None)
    if group is None:
        return int(client.xlen(key))
    if group.get("lag") is not None:
        return int(group["lag"])
    last = group.get("last-delivered-id", "0-0")
    return len(client.xrange(key, f"({last}", "+"))


def pool_saturated(*, pool: ModelPool, shed: bool = False) -> bool:
    """True if ``pool`` has no live worker or more waiting jobs than it accepts.

    With ``shed`` (a lowest-priority request under pressure) the accepted queue depth is
    ``queue_threshold * GATEWAY_SHED_FRACTION``.
    """
    if inference_client.workers_live(pool=pool.name) == 0:
        return True
    threshold = pool.queue_threshold
    if shed:
        threshold = int(threshold * settings.GATEWAY_SHED_FRACTION)
    return queue_waiting(pool=pool.name) > threshold


def plan_is_lowest(*, plan: Plan) -> bool:
    """True if ``plan`` has the lowest priority of several distinct ones (shed first)."""
    lo, hi = selectors.gateway_config().priority_bounds
    return lo is not None and hi is not None and lo < hi and plan.priority <= lo


def pool_admit(*, pool: ModelPool, plan: Plan) -> ModelPool:
    """Return the first pool of ``pool``'s fallback chain that can take a request now.

    Disabled pools in the chain are skipped. Raises PoolSaturated (503 with
    ``Retry-After: GATEWAY_SATURATED_RETRY_AFTER_S``) when none can.
    """
    shed = plan_is_lowest(plan=plan)
    seen: set[str] = set()
    current: ModelPool | None = pool
    while current is not None and current.name not in seen:
        seen.add(current.name)
        if (current.pk is None or current.enabled) and not pool_saturated(
            pool=current, shed=shed
        ):
            return current
        current = current.fallback if current.fallback_id else None
    retry = settings.GATEWAY_SATURATED_RETRY_AFTER_S
    raise PoolSaturated(
        "The assistant is busy right now (every model that could answer is at "
        f"capacity or offline). Please try again in about {retry} seconds.",
        headers={"Retry-After": str(retry)},
    )
