"""Reads of the gateway: a user's plan and quota, pools, API keys, usage reports."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db.models import Count, QuerySet, Sum
from django.db.models.functions import TruncDate

from gateway import quota
from gateway.models import ApiKey, ModelPool, Plan, Subscription, UsageRecord


def plan_for_user(*, user: AbstractBaseUser) -> Plan:
    """Return the user's plan: their subscription's, else the default plan.

    With no default plan in the database (e.g. an empty test database) an unsaved,
    unlimited plan of priority 0 is returned, so the chat keeps working.
    """
    subscription = (
        Subscription.objects.select_related("plan").filter(user_id=user.pk).first()
    )
    if subscription is not None:
        return subscription.plan
    plan = Plan.objects.filter(is_default=True).first()
    return plan or Plan(name="unlimited", is_default=True, priority=0)


def plan_limits(*, plan: Plan) -> quota.Limits:
    """Return a plan's token limits (tokens; None = none)."""
    return quota.Limits(
        per_minute=plan.tokens_per_minute,
        per_day=plan.tokens_per_day,
        per_month=plan.monthly_token_budget,
    )


@dataclass(frozen=True)
class QuotaLine:
    """One limit as shown to the user."""

    label: str
    limit: int
    used: int
    remaining: int
    resets_at: dt.datetime


_LABELS = {
    quota.WINDOW_MINUTE: "this minute",
    quota.WINDOW_DAY: "today",
    quota.WINDOW_MONTH: "this month",
}


def quota_status(*, user: AbstractBaseUser) -> list[QuotaLine]:
    """Return the user's limited windows with tokens used and left (reservations count)."""
    plan = plan_for_user(user=user)
    lines = []
    for w in quota.quota_windows(user_id=user.pk, limits=plan_limits(plan=plan)):
        if w.limit is None:
            continue
        lines.append(
            QuotaLine(
                label=_LABELS[w.name],
                limit=w.limit,
                used=w.used,
                remaining=w.remaining or 0,
                resets_at=dt.datetime.fromtimestamp(w.resets_at, tz=dt.UTC),
            )
        )
    return lines


def pool_default() -> ModelPool:
    """Return an unsaved pool standing for ``INFERENCE_DEFAULT_POOL``.

    Used when the database defines no pool at all (a fresh or flushed database).
    """
    return ModelPool(
        name=settings.INFERENCE_DEFAULT_POOL,
        model="",
        max_output_tokens=settings.GATEWAY_MAX_OUTPUT_TOKENS,
        queue_threshold=settings.GATEWAY_QUEUE_THRESHOLD,
    )


def pool_get(*, name: str) -> ModelPool | None:
    """Return the pool named ``name``, or None."""
    return ModelPool.objects.filter(name=name).first()


def usage_tokens_since(*, user_id: int, since: dt.datetime) -> int:
    """Return the prompt + completion tokens recorded for a user since ``since``."""
    sums = UsageRecord.objects.filter(user_id=user_id, created_at__gte=since).aggregate(
        p=Sum("prompt_tokens"), c=Sum("completion_tokens")
    )
    return (sums["p"] or 0) + (sums["c"] or 0)


def pool_choices(*, user: AbstractBaseUser) -> list[ModelPool]:
    """Return the enabled pools the user's plan allows (for a model picker)."""
    plan = plan_for_user(user=user)
    pools = ModelPool.objects.filter(enabled=True)
    if plan.pk is not None and plan.allowed_pools.exists():
        pools = plan.allowed_pools.filter(enabled=True)
    return list(pools.order_by("name"))


def api_key_list(*, user: AbstractBaseUser) -> QuerySet[ApiKey]:
    """Return the user's API keys, newest first (revoked ones included)."""
    return ApiKey.objects.filter(user=user).order_by("-created_at")


def usage_by_user_day_model(
    *,
    start: dt.date | None = None,
    end: dt.date | None = None,
    ids: list[int] | None = None,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Aggregate usage per (user, UTC day, model) and overall totals.

    ``start``/``end`` are inclusive UTC dates; ``ids`` limits it to those records.
    Returns ``(rows, totals)``; each row has
    ``username, day, model, requests, prompt_tokens, completion_tokens, cached_tokens,
    cost`` (tokens in tokens, cost in currency units).
    """
    records = UsageRecord.objects.all()
    if ids is not None:
        records = records.filter(pk__in=ids)
    if start:
        records = records.filter(created_at__date__gte=start)  # UTC: USE_TZ
    if end:
        records = records.filter(created_at__date__lte=end)
    sums = {
        "requests": Count("id"),
        "prompt_tokens": Sum("prompt_tokens"),
        "completion_tokens": Sum("completion_tokens"),
        "cached_tokens": Sum("cached_tokens"),
        "cost": Sum("cost"),
    }
    rows = list(
        records.annotate(day=TruncDate("created_at", tzinfo=dt.UTC))
        .values("user__username", "day", "model")
        .annotate(**sums)
        .order_by("-day", "user__username", "model")
    )
    for row in rows:
        row["username"] = row.pop("user__username")
    totals = records.aggregate(**sums)
    return rows, totals
