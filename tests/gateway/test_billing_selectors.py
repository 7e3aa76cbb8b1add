"""The billing console's reads (gateway/billing/selectors.py): date ranges, usage per
day/model/user, top users with plan and remaining quota, per-pool load with
PostgreSQL percentiles."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest

from chatsite.errors import InvalidInput
from gateway import quota
from gateway import selectors as gateway_selectors
from gateway.billing import selectors
from gateway.billing.selectors import DateRange
from gateway.models import Plan, UsageRecord
from tests.conftest import make_user
from tests.gateway import factories

pytestmark = pytest.mark.django_db

NOVEMBER = DateRange(start=dt.date(2026, 11, 1), end=dt.date(2026, 11, 30))
_jobs = iter(range(1_000_000))


def record(user, *, day: int = 3, hour: int = 10, model: str = "m-a", **fields):
    """A usage record on 2026-11-``day`` at ``hour``:00 UTC."""
    values = {
        "pool": "default",
        "model": model,
        "prompt_tokens": 0,
        "completion_tokens": 0,
        "cost": Decimal("0"),
        "status": UsageRecord.Status.COMPLETE,
        "created_at": dt.datetime(2026, 11, day, hour, tzinfo=dt.UTC),
        **fields,
    }
    return UsageRecord.objects.create(user=user, job_id=f"j{next(_jobs)}", **values)


def test_the_default_range_is_the_last_30_days_today_included():
    period = selectors.date_range_parse(start=None, end="", today=dt.date(2026, 12, 1))
    assert (period.start, period.end) == (dt.date(2026, 11, 2), dt.date(2026, 12, 1))
    assert len(period.days) == 30
    assert period.since == dt.datetime(2026, 11, 2, tzinfo=dt.UTC)
    assert period.until == dt.datetime(2026, 12, 2, tzinfo=dt.UTC)


@pytest.mark.parametrize(
    ("start", "end", "says"),
    [
        (
            "2026-13-01",
            None,
            "The start date '2026-13-01' is not a date: use YYYY-MM-DD",
        ),
        ("2026-11-01", "yesterday", "The end date 'yesterday' is not a date"),
        ("2026-11-05", "2026-11-01", "is after the end date 2026-11-01"),
        ("2020-01-01", "2026-11-01", "longer than 731 days"),
    ],
)
def test_a_bad_range_is_refused_with_a_message_that_says_why(start, end, says):
    with pytest.raises(InvalidInput) as info:
        selectors.date_range_parse(start=start, end=end, today=dt.date(2026, 12, 1))
    assert says in info.value.message


def test_usage_per_day_has_every_day_and_only_the_range():
    ann = make_user("ann")
    record(ann, day=3, prompt_tokens=1000, completion_tokens=500, cost=Decimal("1.5"))
    record(ann, day=3, hour=23, prompt_tokens=10, completion_tokens=0)
    record(ann, day=5, prompt_tokens=7, completion_tokens=3, cost=Decimal("0.01"))
    # outside: the last instant of October and the first of December
    UsageRecord.objects.create(
        user=ann,
        job_id="oct",
        prompt_tokens=99,
        created_at=dt.datetime(2026, 10, 31, 23, 59, 59, tzinfo=dt.UTC),
        status="complete",
    )
    UsageRecord.objects.create(
        user=ann,
        job_id="dec",
        prompt_tokens=99,
        created_at=dt.datetime(2026, 12, 1, tzinfo=dt.UTC),
        status="complete",
    )
    days = selectors.usage_by(period=NOVEMBER, by="day")
    assert [d.key for d in days][:3] == ["2026-11-01", "2026-11-02", "2026-11-03"]
    assert len(days) == 30
    by_key = {d.key: d for d in days}
    assert (by_key["2026-11-03"].requests, by_key["2026-11-03"].total_tokens) == (
        2,
        1510,
    )
    assert by_key["2026-11-03"].cost == Decimal("1.5")
    assert by_key["2026-11-05"].total_tokens == 10
    assert sum(d.requests for d in days) == 3
    total = selectors.usage_total(period=NOVEMBER)
    assert (total.requests, total.prompt_tokens, total.completion_tokens) == (
        3,
        1017,
        503,
    )


def test_usage_per_model_and_user_is_ordered_by_cost():
    ann, bob = make_user("ann"), make_user("bob")
    record(ann, model="small", prompt_tokens=100, cost=Decimal("0.1"))
    record(bob, model="big", prompt_tokens=50, cost=Decimal("2"))
    record(bob, model="", prompt_tokens=5)
    models = selectors.usage_by(period=NOVEMBER, by="model")
    assert [(m.key, m.total_tokens, m.cost) for m in models] == [
        ("big", 50, Decimal("2")),
        ("small", 100, Decimal("0.1")),
        ("(none)", 5, Decimal("0")),
    ]
    users = selectors.usage_by(period=NOVEMBER, by="user")
    assert [(u.key, u.requests) for u in users] == [("bob", 2), ("ann", 1)]
    with pytest.raises(ValueError):
        selectors.usage_by(period=NOVEMBER, by="pool")  # type: ignore[arg-type]  # a bad `by` on purpose


def test_top_users_by_spend_with_plan_and_remaining_quota():
    # the seeded default plan ("free", migration 0002), without a daily limit here
    Plan.objects.filter(is_default=True).update(
        name="free", monthly_token_budget=5000, tokens_per_day=None
    )
    pro = factories.plan("pro", monthly_token_budget=10_000, tokens_per_day=2000)
    ann, bob, carl = make_user("ann"), make_user("bob"), make_user("carl")
    factories.subscribe(bob, pro)
    record(ann, prompt_tokens=300, cost=Decimal("3"))
    record(bob, prompt_tokens=100, cost=Decimal("4"))
    record(bob, day=9, prompt_tokens=100, cost=Decimal("1"))
    record(carl, prompt_tokens=900, cost=Decimal("1"))
    # bob has 1,500 tokens counted this month (a reservation in flight among them)
    quota.quota_reserve(
        user_id=bob.pk,
        job_id="live",
        tokens=1500,
        limits=gateway_selectors.plan_limits(plan=pro),
    )
    # ann's counters are absent: her records of this month count (as seeding would)
    UsageRecord.objects.create(
        user=ann, job_id="now", prompt_tokens=700, status="complete"
    )
    top = selectors.top_users_by_spend(period=NOVEMBER, limit=2)
    assert [(u.username, u.plan, u.requests, u.tokens, u.cost) for u in top] == [
        ("bob", "pro", 2, 200, Decimal("5")),
        ("ann", "free", 1, 300, Decimal("3")),
    ]
    bob_left, ann_left = top[0], top[1]
    assert bob_left.left_this_month.remaining == 8500
    assert bob_left.left_today.remaining == 500
    assert ann_left.left_today is None  # the free plan has no daily limit
    assert ann_left.left_this_month.used == 700
    assert ann_left.left_this_month.remaining == 4300


def test_top_users_ties_on_cost_go_by_tokens_then_name():
    ann, bob, cid = make_user("ann"), make_user("bob"), make_user("cid")
    record(cid, prompt_tokens=10, cost=Decimal("1"))
    record(bob, prompt_tokens=10, cost=Decimal("1"))
    record(ann, prompt_tokens=5, cost=Decimal("1"))
    top = selectors.top_users_by_spend(period=NOVEMBER)
    assert [u.username for u in top] == ["bob", "cid", "ann"]


def test_a_user_without_any_plan_in_the_database_is_unlimited():
    Plan.objects.all().delete()
    record(make_user("ann"), prompt_tokens=5, cost=Decimal("1"))
    (ann,) = selectors.top_users_by_spend(period=NOVEMBER)
    assert ann.plan == "unlimited" and ann.quota == {} and ann.left_today is None


def test_pool_load_counts_errors_and_interpolates_ttft_percentiles():
    ann = make_user("ann")
    for ttft in (100, 200, 300, 400):
        record(ann, pool="fast", ttft_ms=ttft, prompt_tokens=1)
    record(ann, pool="fast", ttft_ms=None, status=UsageRecord.Status.ERROR)
    record(ann, pool="slow", ttft_ms=1000, status=UsageRecord.Status.ERROR)
    record(ann, pool="slow", ttft_ms=3000)
    record(ann, pool="", ttft_ms=None, status=UsageRecord.Status.CANCELLED)
    record(
        ann, pool="old", ttft_ms=5, created_at=dt.datetime(2026, 12, 1, tzinfo=dt.UTC)
    )
    load = {p.pool: p for p in selectors.pool_load(period=NOVEMBER)}
    assert set(load) == {"fast", "slow", "(none)"}
    fast, slow = load["fast"], load["slow"]
    assert (fast.requests, fast.errors, fast.tokens) == (5, 1, 4)
    assert fast.error_rate == pytest.approx(0.2)
    # percentile_cont: rank (n - 1) * q between the sorted values, NULLs left out
    assert fast.ttft_p50_ms == pytest.approx(250.0)  # halfway from 200 to 300
    assert fast.ttft_p99_ms == pytest.approx(397.0)  # 300 + 0.97 * 100
    assert (slow.requests, slow.errors) == (2, 1)
    assert slow.ttft_p50_ms == pytest.approx(2000.0)
    assert slow.ttft_p99_ms == pytest.approx(2980.0)
    assert load["(none)"].ttft_p50_ms is None and load["(none)"].ttft_p99_ms is None


def test_percentile_fraction_must_be_between_0_and_1():
    with pytest.raises(ValueError):
        selectors.PercentileCont("ttft_ms", fraction=1.5)
