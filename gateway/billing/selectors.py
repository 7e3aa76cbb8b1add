"""Reads of the billing console and ``manage.py usage_report``.

Every figure comes from :class:`~gateway.models.UsageRecord` (one row per settled
request: tokens, cost in currency units, TTFT in ms, status), over a range of whole
UTC days, except the remaining quota, which is read from the Redis counters of
:mod:`gateway.quota` without reserving anything.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Literal

from django.contrib.auth import get_user_model
from django.db.models import Aggregate, Count, F, FloatField, Q, QuerySet, Sum
from django.db.models.functions import TruncDate

from chatsite.errors import InvalidInput
from gateway import quota
from gateway.models import UsageRecord
from gateway.selectors import plan_for_user, plan_limits, usage_tokens_since

# The console's default range: the last 30 UTC days, today included.
DEFAULT_RANGE_DAYS = 30
# Longest range accepted (days): one bar per day stays readable up to about two years.
MAX_RANGE_DAYS = 731

GroupBy = Literal["day", "model", "user"]
GROUP_BY_CHOICES: tuple[GroupBy, ...] = ("day", "model", "user")


@dataclass(frozen=True)
class DateRange:
    """Whole UTC days from ``start`` to ``end``, both included."""

    start: dt.date
    end: dt.date

    @property
    def since(self) -> dt.datetime:
        """The first instant of the range (00:00 UTC of ``start``)."""
        return dt.datetime.combine(self.start, dt.time.min, tzinfo=dt.UTC)

    @property
    def until(self) -> dt.datetime:
        """The first instant after the range (00:00 UTC of the day after ``end``)."""
        return self.since + dt.timedelta(days=(self.end - self.start).days + 1)

    @property
    def days(self) -> list[dt.date]:
        """Every day of the range, in order."""
        count = (self.end - self.start).days + 1
        return [self.start + dt.timedelta(days=i) for i in range(count)]


def _date_parse(value: str, *, name: str) -> dt.date:
    try:
        return dt.date.fromisoformat(value.strip())
    except ValueError as exc:
        raise InvalidInput(
            f"The {name} date {value!r} is not a date: use YYYY-MM-DD "
            "(for example 2026-11-30).",
            code="invalid_date",
        ) from exc


def date_range_parse(
    *,
    start: str | None,
    end: str | None,
    today: dt.date | None = None,
    max_days: int = MAX_RANGE_DAYS,
) -> DateRange:
    """Parse an inclusive range of UTC days from ISO dates (``YYYY-MM-DD``).

    A missing ``end`` is ``today`` (UTC); a missing ``start`` is DEFAULT_RANGE_DAYS
    days before ``end``, ``end`` included. Raises :class:`InvalidInput` for a value
    that is not a date, a start after the end, or a range longer than ``max_days``.
    """
    today = today or dt.datetime.now(dt.UTC).date()
    end_day = _date_parse(end, name="end") if end and end.strip() else today
    start_day = (
        _date_parse(start, name="start")
        if start and start.strip()
        else end_day - dt.timedelta(days=DEFAULT_RANGE_DAYS - 1)
    )
    if start_day > end_day:
        raise InvalidInput(
            f"The start date {start_day:%Y-%m-%d} is after the end date "
            f"{end_day:%Y-%m-%d}.",
            code="invalid_date_range",
        )
    if (end_day - start_day).days + 1 > max_days:
        raise InvalidInput(
            f"The range {start_day:%Y-%m-%d} to {end_day:%Y-%m-%d} is longer than "
            f"{max_days} days: choose a shorter one.",
            code="invalid_date_range",
        )
    return DateRange(start=start_day, end=end_day)


def _records(period: DateRange) -> QuerySet[UsageRecord]:
    return UsageRecord.objects.filter(
        created_at__gte=period.since, created_at__lt=period.until
    )


_SUMS: dict[str, Any] = {
    "requests": Count("id"),
    "prompt_tokens": Sum("prompt_tokens", default=0),
    "completion_tokens": Sum("completion_tokens", default=0),
    "cost": Sum("cost", default=Decimal("0")),
}


@dataclass(frozen=True)
class UsageRow:
    """Usage of one group (a day as ``YYYY-MM-DD``, a model or a username).

    Tokens in tokens, ``cost`` in currency units (the pools' prices per 1,000 tokens).
    """

    key: str
    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: Decimal = Decimal("0")

    @property
    def total_tokens(self) -> int:
        """Prompt plus completion tokens."""
        return self.prompt_tokens + self.completion_tokens


def _row(key: str, sums: Mapping[str, Any]) -> UsageRow:
    return UsageRow(
        key=key,
        requests=sums["requests"],
        prompt_tokens=sums["prompt_tokens"],
        completion_tokens=sums["completion_tokens"],
        cost=sums["cost"],
    )


def usage_by(*, period: DateRange, by: GroupBy) -> list[UsageRow]:
    """Usage per UTC day, model or user over ``period``.

    ``by="day"``: one row per day of the range in order, days without usage included
    (zeros), so a chart has every day. ``by="model"`` / ``"user"``: one row per model
    (an empty model name is ``"(none)"``) or username that has usage, highest cost
    first, then most tokens, then by name. Raises ValueError for another ``by``.
    """
    records = _records(period)
    if by == "day":
        found = {
            r["day"]: r
            for r in records.annotate(day=TruncDate("created_at", tzinfo=dt.UTC))
            .values("day")
            .annotate(**_SUMS)
        }
        return [
            _row(f"{day:%Y-%m-%d}", found[day])
            if day in found
            else UsageRow(key=f"{day:%Y-%m-%d}")
            for day in period.days
        ]
    if by == "model":
        group = "model"
    elif by == "user":
        group = "user__username"
    else:
        raise ValueError(f"unknown grouping {by!r}; choose one of {GROUP_BY_CHOICES}")
    rows = [
        _row(r[group] or "(none)", r)
        for r in records.values(group).annotate(**_SUMS).order_by()
    ]
    return sorted(rows, key=lambda r: (-r.cost, -r.total_tokens, r.key))


def usage_total(*, period: DateRange) -> UsageRow:
    """Usage of every request in ``period`` together (key ``"total"``)."""
    return _row("total", _records(period).aggregate(**_SUMS))


@dataclass(frozen=True)
class QuotaLeft:
    """One limited quota window of a user now: tokens ``used`` (reservations in
    flight included) of ``limit``, and ``remaining``."""

    window: str
    limit: int
    used: int

    @property
    def remaining(self) -> int:
        """Tokens left in the window (never below zero)."""
        return max(0, self.limit - self.used)


@dataclass(frozen=True)
class UserSpend:
    """A user's spend over a range with their plan and the quota they have left now.

    ``quota``: window name (:data:`gateway.quota.WINDOW_DAY`, ...) -> what is left, for
    the plan's limited windows only (an absent window has no limit).
    """

    user_id: int
    username: str
    plan: str
    requests: int
    tokens: int
    cost: Decimal
    quota: dict[str, QuotaLeft] = field(default_factory=dict)

    @property
    def left_today(self) -> QuotaLeft | None:
        """The daily window, None without a daily limit."""
        return self.quota.get(quota.WINDOW_DAY)

    @property
    def left_this_month(self) -> QuotaLeft | None:
        """The monthly window, None without a monthly budget."""
        return self.quota.get(quota.WINDOW_MONTH)


def _window_start(window: quota.Window) -> dt.datetime:
    """The first instant of a day or month window (it ends at ``resets_at``)."""
    last = dt.datetime.fromtimestamp(window.resets_at - 1, tz=dt.UTC)
    start = last.replace(hour=0, minute=0, second=0, microsecond=0)
    return start if window.name == quota.WINDOW_DAY else start.replace(day=1)


def quota_left(*, user: Any) -> dict[str, QuotaLeft]:
    """What the user has left now in each limited window of their plan (tokens).

    Read-only: the Redis counters (reservations in flight count as used). A day or
    month counter absent from Redis (a new period, a Redis that lost its data) is what
    the next request would seed it with (gateway.generations.admission): the tokens
    of the usage records since the window started.
    """
    limits = plan_limits(plan=plan_for_user(user=user))
    windows = quota.quota_windows(user_id=user.pk, limits=limits)
    unseeded = {w.key for w in quota.quota_unseeded(user_id=user.pk)}
    left = {}
    for w in windows:
        if w.limit is None:
            continue
        used = w.used
        if w.key in unseeded:
            used = usage_tokens_since(user_id=user.pk, since=_window_start(w))
        left[w.name] = QuotaLeft(window=w.name, limit=w.limit, used=used)
    return left


def top_users_by_spend(*, period: DateRange, limit: int = 20) -> list[UserSpend]:
    """The ``limit`` users who spent most in ``period`` (cost, then tokens, then
    username), with their current plan and remaining quota (:func:`quota_left`).

    Queries: one aggregate, one for the users with their subscriptions; Redis: two
    reads per user.
    """
    # Mapping: the stubs' row type lacks the keys annotated from **_SUMS
    rows: list[Mapping[str, Any]] = list(
        _records(period)
        .values("user_id", "user__username")
        .annotate(**_SUMS)
        .annotate(tokens=F("prompt_tokens") + F("completion_tokens"))
        .order_by("-cost", "-tokens", "user__username")[:limit]
    )
    users = (
        get_user_model()
        .objects.select_related("subscription")
        .in_bulk([r["user_id"] for r in rows])
    )
    spends = []
    for r in rows:
        user = users[r["user_id"]]
        spends.append(
            UserSpend(
                user_id=r["user_id"],
                username=r["user__username"],
                plan=plan_for_user(user=user).name,
                requests=r["requests"],
                tokens=r["tokens"],
                cost=r["cost"],
                quota=quota_left(user=user),
            )
        )
    return spends


class PercentileCont(Aggregate):
    """PostgreSQL's ``percentile_cont(fraction) WITHIN GROUP (ORDER BY expression)``:
    the continuous percentile (linear interpolation between the two nearest values),
    NULLs ignored; NULL for a group without values. ``fraction`` in [0, 1]."""

    function = "percentile_cont"
    name = "PercentileCont"
    template = "%(function)s(%(fraction)s) WITHIN GROUP (ORDER BY %(expressions)s)"
    output_field = FloatField()

    def __init__(self, expression: Any, *, fraction: float, **extra: Any) -> None:
        fraction = float(fraction)
        if not 0.0 <= fraction <= 1.0:
            raise ValueError(f"fraction must be in [0, 1], not {fraction}")
        super().__init__(expression, fraction=repr(fraction), **extra)


@dataclass(frozen=True)
class PoolLoad:
    """Load of one pool over a range: requests, errors (status ``error``), and time to
    first token in ms (p50 / p99 over the requests that have one; None if none)."""

    pool: str
    requests: int
    errors: int
    tokens: int
    ttft_p50_ms: float | None
    ttft_p99_ms: float | None

    @property
    def error_rate(self) -> float:
        """Share of requests that ended in an error (0..1)."""
        return self.errors / self.requests if self.requests else 0.0


def pool_load(*, period: DateRange) -> list[PoolLoad]:
    """Per pool (by name; ``"(none)"`` for records without one) over ``period``:
    requests, errors, tokens and TTFT p50/p99 (PostgreSQL ``percentile_cont``), by
    pool name. One query."""
    rows: Iterable[Mapping[str, Any]] = (
        _records(period)
        .values("pool")
        .annotate(
            **_SUMS,
            errors=Count("id", filter=Q(status=UsageRecord.Status.ERROR)),
            p50=PercentileCont("ttft_ms", fraction=0.5),
            p99=PercentileCont("ttft_ms", fraction=0.99),
        )
        .order_by("pool")
    )
    return [
        PoolLoad(
            pool=r["pool"] or "(none)",
            requests=r["requests"],
            errors=r["errors"],
            tokens=r["prompt_tokens"] + r["completion_tokens"],
            ttft_p50_ms=r["p50"],
            ttft_p99_ms=r["p99"],
        )
        for r in rows
    ]
