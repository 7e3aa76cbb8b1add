"""Reads of the gateway: a user's plan, quota and preferences, pools, API keys, usage
reports."""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.db import connection
from django.db.models import Count, QuerySet, Sum
from django.db.models.functions import TruncDate

from chatsite.db import connection_return
from gateway import quota
from gateway.models import (
    ApiKey,
    ModelPool,
    Plan,
    Subscription,
    UsageRecord,
    UserPreference,
)
from safety.backends import UserReadColumn

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class GatewayConfig:
    """A snapshot of the admin-edited configuration: pools, plans and their links.

    ``pools`` by name (each ``fallback`` resolved to a pool of the same snapshot),
    ``plans`` by id, ``allowed`` plan id -> allowed pool names. Shared read-only by the
    threads of a process: never mutate its objects.
    """

    pools: dict[str, ModelPool]
    plans: dict[int, Plan]
    allowed: dict[int, frozenset[str]]
    loaded_at: float

    @property
    def default_plan(self) -> Plan | None:
        """The plan of users without a subscription, if one is marked default."""
        return next((p for p in self.plans.values() if p.is_default), None)

    def pools_of(self, *, kind: str) -> list[ModelPool]:
        """The pools of ``kind`` (a :class:`ModelPool.Kind`), enabled or not."""
        return [p for p in self.pools.values() if p.kind == kind]

    @property
    def priority_bounds(self) -> tuple[int | None, int | None]:
        """Lowest and highest plan priority (None, None without plans)."""
        priorities = [p.priority for p in self.plans.values()]
        return (min(priorities), max(priorities)) if priorities else (None, None)


_config: GatewayConfig | None = None
_config_lock = threading.Lock()
_config_refreshing = False  # a background reload is under way


def _config_load() -> GatewayConfig:
    pools = list(ModelPool.objects.all())
    by_id = {p.pk: p for p in pools}
    for pool in pools:
        if pool.fallback_id is not None and pool.fallback_id in by_id:
            pool.fallback = by_id[pool.fallback_id]
    allowed: dict[int, set[str]] = {}
    for plan_id, name in Plan.allowed_pools.through.objects.values_list(
        "plan_id", "modelpool__name"
    ):
        allowed.setdefault(plan_id, set()).add(name)
    return GatewayConfig(
        pools={p.name: p for p in pools},
        plans={p.pk: p for p in Plan.objects.all()},
        allowed={k: frozenset(v) for k, v in allowed.items()},
        loaded_at=time.monotonic(),
    )


def gateway_config() -> GatewayConfig:
    """Return the pools/plans snapshot, reloaded after GATEWAY_CONFIG_CACHE_S seconds.

    Admin edits reach a running process within that time (0: every call reloads, 3
    queries). Saves the routing queries on the hot path of every request: a snapshot
    older than half that time is returned and reloaded on a background thread
    (:func:`_config_refresh`), so a process in steady use reloads inline only after
    an idle spell; threads that find it expired together reload it once.
    """
    global _config, _config_refreshing
    ttl = settings.GATEWAY_CONFIG_CACHE_S
    config = _config
    if config is None or ttl <= 0 or time.monotonic() - config.loaded_at >= ttl:
        with _config_lock:
            config = _config  # another thread may have reloaded it meanwhile
            if config is None or ttl <= 0 or config.loaded_at <= time.monotonic() - ttl:
                config = _config_load()
                _config = config
        return config
    if time.monotonic() - config.loaded_at >= ttl / 2 and not _config_refreshing:
        _config_refreshing = True  # a race starts two refreshes at worst: harmless
        threading.Thread(
            target=_config_refresh, args=(config,), name="config-refresh", daemon=True
        ).start()
    return config


def _config_refresh(config: GatewayConfig) -> None:
    """Load a snapshot in place of ``config`` (stamped when the load started: the
    bound holds) unless another load replaced it meanwhile; a failed load leaves it
    to expire. The thread's connection goes back to the pool after."""
    global _config, _config_refreshing
    try:
        started = time.monotonic()
        fresh = _config_load()
        with _config_lock:
            if _config is config:
                _config = dataclasses.replace(fresh, loaded_at=started)
    except Exception:
        logger.exception("gateway config refresh failed (the snapshot expires)")
    finally:
        _config_refreshing = False
        connection_return()


# The attribute on a session's user that holds their subscribed plan's id (None: no
# subscription), read with the user in the same query (safety.backends.
# user_read_extend, registered by gateway.apps): as fresh as the user row, never kept
# across requests.
PLAN_ID_ATTR = "subscribed_plan_id"
_UNREAD = object()


def plan_id_column() -> UserReadColumn:
    """The session user read's column of :data:`PLAN_ID_ATTR`."""
    quote = connection.ops.quote_name
    return UserReadColumn(
        sql=f"SELECT s.{quote('plan_id')} FROM {quote(Subscription._meta.db_table)} s"
        f" WHERE s.{quote('user_id')} = u.id",
        attr=PLAN_ID_ATTR,
    )


def _subscription_plan_id(user: User) -> int | None:
    """The user's subscribed plan id: read with the session's user
    (:data:`PLAN_ID_ATTR`: no query), or from the subscription loaded with the user
    (``select_related("user__subscription")``, as API-key authentication does: no
    query), else one query."""
    read = getattr(user, PLAN_ID_ATTR, _UNREAD)
    if read is not _UNREAD:
        return read  # type: ignore[return-value]
    descriptor = getattr(type(user), "subscription", None)
    if descriptor is not None and descriptor.is_cached(user):
        subscription = descriptor.related.get_cached_value(user)
        return subscription.plan_id if subscription is not None else None
    return (
        Subscription.objects.filter(user_id=user.pk)
        .values_list("plan_id", flat=True)
        .first()
    )


def plan_for_user(*, user: User) -> Plan:
    """Return the user's plan: their subscription's, else the default plan.

    With no default plan in the database (e.g. an empty test database) an unsaved,
    unlimited plan of priority 0 is returned, so the chat keeps working.
    """
    config = gateway_config()
    plan_id = _subscription_plan_id(user)
    if plan_id is not None:
        plan = config.plans.get(plan_id)
        return plan if plan is not None else Plan.objects.get(pk=plan_id)
    plan = config.default_plan
    return plan or Plan(
        name="unlimited",
        is_default=True,
        priority=0,
        requests_per_minute=None,
        key_requests_per_minute=None,
    )


def plan_pools(
    *, plan: Plan, kind: str | None = ModelPool.Kind.CHAT
) -> list[ModelPool]:
    """Return the enabled pools of ``kind`` that ``plan`` may use.

    ``kind``: a :class:`ModelPool.Kind` (default chat: chat routing never sees an
    embedding pool), or None for every kind. A plan that lists no pool may use every
    enabled pool; one that lists some may use those only (of each kind: a plan listing
    only chat pools gets no embeddings).
    """
    config = gateway_config()
    enabled = [
        p
        for p in config.pools.values()
        if p.enabled and (kind is None or p.kind == kind)
    ]
    names = config.allowed.get(plan.pk) if plan.pk is not None else None
    return [p for p in enabled if p.name in names] if names else enabled


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


def quota_status(*, user: User) -> list[QuotaLine]:
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
    """Return an unsaved chat pool standing for ``INFERENCE_DEFAULT_POOL``.

    Used when the database defines no chat pool (a fresh or flushed database).
    """
    return ModelPool(
        name=settings.INFERENCE_DEFAULT_POOL,
        model="",
        # the window the embedded worker is started with (its --n-ctx)
        max_context=settings.MEMORY_CONTEXT_TOKENS,
        max_output_tokens=settings.GATEWAY_MAX_OUTPUT_TOKENS,
        queue_threshold=settings.GATEWAY_QUEUE_THRESHOLD,
    )


def chat_pools_defined() -> bool:
    """True if the database defines a chat pool (else chat uses :func:`pool_default`)."""
    return bool(gateway_config().pools_of(kind=ModelPool.Kind.CHAT))


def pool_get(*, name: str) -> ModelPool | None:
    """Return the pool named ``name`` (from :func:`gateway_config`), or None."""
    return gateway_config().pools.get(name)


def usage_tokens_since(*, user_id: int, since: dt.datetime) -> int:
    """Return the prompt + completion tokens recorded for a user since ``since``."""
    sums = UsageRecord.objects.filter(user_id=user_id, created_at__gte=since).aggregate(
        p=Sum("prompt_tokens"), c=Sum("completion_tokens")
    )
    return (sums["p"] or 0) + (sums["c"] or 0)


def usage_for_message(*, message_id: Any) -> UsageRecord | None:
    """Return the usage record of the generation that wrote chat message
    ``message_id`` (the newest, should a job be recorded twice), or None."""
    return (
        UsageRecord.objects.filter(message_id=message_id)
        .order_by("-created_at")
        .first()
    )


def pool_choices(
    *, user: User, kind: str | None = ModelPool.Kind.CHAT
) -> list[ModelPool]:
    """Return the enabled pools of ``kind`` the user's plan allows, by name.

    Default: chat pools (the chat page's model picker); ``kind=None``: every kind
    (``GET /v1/models``), chat pools first.
    """
    pools = plan_pools(plan=plan_for_user(user=user), kind=kind)
    return sorted(pools, key=lambda p: (p.kind != ModelPool.Kind.CHAT, p.name))


def api_key_list(*, user: User, include_revoked: bool = False) -> QuerySet[ApiKey]:
    """Return the user's API keys, newest first; revoked ones only if asked (the
    settings page hides them)."""
    keys = ApiKey.objects.filter(user=user)
    if not include_revoked:
        keys = keys.filter(revoked_at__isnull=True)
    return keys.order_by("-created_at")


def user_preference_get(*, user: User) -> UserPreference:
    """Return the user's gateway preferences; an unsaved row of defaults if none is stored.

    One query. Defaults: ``reuse_cached_answers`` False (see :class:`UserPreference`).
    """
    preference = UserPreference.objects.filter(user_id=user.pk).first()
    return preference or UserPreference(user_id=user.pk)


def cache_opt_in(*, user: User) -> bool:
    """True if the user chose to reuse cached answers (gateway.cache opt-in; off by
    default). One query; read by the chat turn before admission."""
    return bool(
        UserPreference.objects.filter(user_id=user.pk)
        .values_list("reuse_cached_answers", flat=True)
        .first()
    )


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
    rows: list[dict[str, Any]] = [
        dict(row)
        for row in records.annotate(day=TruncDate("created_at", tzinfo=dt.UTC))
        .values("user__username", "day", "model")
        .annotate(**sums)
        .order_by("-day", "user__username", "model")
    ]
    for row in rows:
        row["username"] = row.pop("user__username")
    totals = records.aggregate(**sums)
    return rows, totals


def default_model(
    *, user: User, preference: UserPreference | None = None
) -> str | None:
    """Return the pool name the user chose as their default model (Settings), or None.

    None also when the choice is no longer allowed (the pool was disabled or the plan
    changed): the chat then routes as if nothing had been chosen, never failing a turn
    over a stale preference. Two queries at most (preference, the plan's pools);
    ``preference``, the user's already read (:func:`user_preference_get`), saves one.
    """
    if preference is None:
        preference = user_preference_get(user=user)
    chosen = preference.default_model
    if not chosen:
        return None
    allowed = {p.name for p in pool_choices(user=user)}
    return chosen if chosen in allowed else None
