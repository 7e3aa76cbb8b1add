"""The staff commands create_plan, assign_plan, reset_quota and usage_report
(gateway/management/commands/): clear output, a clear error and exit status 1 on bad
input, an audit entry for every write."""

from __future__ import annotations

import csv
import datetime as dt
import io
from decimal import Decimal

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connections

from audit.models import AuditLogEntry
from gateway import quota, selectors
from gateway.management.commands import assign_plan
from gateway.models import Plan, Subscription, UsageRecord
from tests.conftest import make_user
from tests.gateway import factories

pytestmark = pytest.mark.django_db


def run(*args: str) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def audits(object_type: str) -> list[AuditLogEntry]:
    return list(AuditLogEntry.objects.filter(object_type=object_type).order_by("pk"))


# --- create_plan ----------------------------------------------------------------------


def test_create_plan_creates_and_audits_it():
    factories.pool("fast")
    out = run(
        "create_plan",
        "pro",
        "--tokens-per-month",
        "1_000_000",
        "--tpm",
        "20,000",
        "--pool",
        "fast",
        "--priority",
        "5",
    )
    plan = Plan.objects.get(name="pro")
    assert (plan.monthly_token_budget, plan.tokens_per_minute, plan.tokens_per_day) == (
        1_000_000,
        20_000,
        None,
    )
    assert plan.priority == 5 and list(
        plan.allowed_pools.values_list("name", flat=True)
    ) == ["fast"]
    assert "Created plan 'pro': per month 1,000,000 tokens" in out
    assert "per day no limit" in out and "pools: fast" in out
    (entry,) = audits("gateway.plan")
    assert entry.action == AuditLogEntry.Verb.ADD and entry.before is None
    assert entry.after["monthly_token_budget"] == 1_000_000
    assert entry.actor is None and entry.actor_label.startswith("command")


def test_create_plan_as_default_moves_the_mark_and_audits_both():
    old = Plan.objects.get(is_default=True)
    run("create_plan", "basic", "--tokens-per-month", "unlimited", "--default")
    assert Plan.objects.get(is_default=True).name == "basic"
    old.refresh_from_db()
    assert not old.is_default
    actions = [(e.object_id, e.action) for e in audits("gateway.plan")]
    basic = Plan.objects.get(name="basic")
    assert actions == [(str(old.pk), "change"), (str(basic.pk), "add")]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["free", "--tokens-per-month", "5"], "A plan named 'free' already exists."),
        (["x", "--tokens-per-month", "5", "--pool", "nope"], "No pool named nope"),
        (["  ", "--tokens-per-month", "5"], "The plan name must not be empty."),
    ],
)
def test_create_plan_fails_clearly_and_stores_nothing(args, says):
    before = Plan.objects.count()
    with pytest.raises(CommandError, match=says):
        run("create_plan", *args)
    assert Plan.objects.count() == before
    assert audits("gateway.plan") == []


def test_create_plan_refuses_a_limit_that_is_not_a_token_count():
    with pytest.raises(CommandError, match="'lots' is not a token count"):
        run("create_plan", "x", "--tokens-per-month", "lots")
    with pytest.raises(CommandError, match="--tokens-per-month"):
        run("create_plan", "x")  # the budget is required


# --- assign_plan ----------------------------------------------------------------------


def test_assign_plan_subscribes_then_changes_and_audits_each():
    ann = make_user("ann")
    factories.plan("pro")
    factories.plan("team")
    assert "ann is now on plan 'pro' (was the default plan)." in run(
        "assign_plan", "ann", "pro"
    )
    assert "ann is now on plan 'team' (was pro)." in run("assign_plan", "ann", "team")
    assert selectors.plan_for_user(user=ann).name == "team"
    add, change = audits("gateway.subscription")
    assert add.action == "add" and change.action == "change"
    team = Plan.objects.get(name="team")
    assert change.before["plan_id"] != team.pk and change.after["plan_id"] == team.pk


def test_assign_plan_fails_clearly_on_an_unknown_user_or_plan():
    make_user("ann")
    with pytest.raises(CommandError, match="No user named 'ghost'."):
        run("assign_plan", "ghost", "free")
    with pytest.raises(CommandError, match=r"No plan named 'gold' \(plans: free\)."):
        run("assign_plan", "ann", "gold")
    assert not Subscription.objects.exists()
    assert audits("gateway.subscription") == []


def test_a_failing_command_exits_with_status_1_and_says_why(monkeypatch, capsys):
    # run_from_argv is what manage.py calls; it closes the connections at the end,
    # which would end the test's transaction
    monkeypatch.setattr(connections, "close_all", lambda: None)
    with pytest.raises(SystemExit) as info:
        assign_plan.Command().run_from_argv(["manage.py", "assign_plan", "ghost", "x"])
    assert info.value.code == 1
    assert "CommandError: No user named 'ghost'." in capsys.readouterr().err


# --- reset_quota ----------------------------------------------------------------------


def test_reset_quota_restores_the_budget_and_audits_it():
    ann = make_user("ann")
    tiny = factories.plan("tiny", tokens_per_day=1000, monthly_token_budget=1000)
    factories.subscribe(ann, tiny)
    limits = selectors.plan_limits(plan=tiny)
    quota.quota_reserve(user_id=ann.pk, job_id="spent", tokens=900, limits=limits)
    quota.quota_settle(user_id=ann.pk, job_id="spent", tokens=900)
    quota.quota_reserve(user_id=ann.pk, job_id="live", tokens=60, limits=limits)
    out = run("reset_quota", "ann")
    assert "Reset the quota of ann:" in out
    assert "960 -> 60 tokens used (requests in flight)" in out
    left = {line.label: line.remaining for line in selectors.quota_status(user=ann)}
    assert left == {"today": 940, "this month": 940}
    quota.quota_reserve(user_id=ann.pk, job_id="next", tokens=900, limits=limits)
    (entry,) = audits("auth.user")
    assert entry.action == "change" and entry.object_id == str(ann.pk)
    assert entry.before["quota_tokens_used"]["day"] == 960
    assert entry.after["quota_tokens_used"]["month"] == 60


def test_reset_quota_fails_clearly_on_an_unknown_user():
    with pytest.raises(CommandError, match="No user named 'ghost'."):
        run("reset_quota", "ghost")
    assert audits("auth.user") == []


# --- usage_report ---------------------------------------------------------------------


@pytest.fixture
def usage():
    ann, bob = make_user("ann"), make_user("bob")
    for job, user, day, model, tokens, cost in [
        ("1", ann, 3, "m-a", 1500, "1.5"),
        ("2", bob, 3, "m-b", 250, "4"),
        ("3", bob, 4, "m-b", 1000, "0.25"),
    ]:
        UsageRecord.objects.create(
            user=user,
            job_id=job,
            model=model,
            prompt_tokens=tokens,
            completion_tokens=10,
            cost=Decimal(cost),
            status="complete",
            created_at=dt.datetime(2026, 11, day, 8, tzinfo=dt.UTC),
        )


def test_usage_report_prints_a_table_with_totals(usage):
    out = run("usage_report", "--since", "2026-11-01", "--until", "2026-11-30")
    lines = out.splitlines()
    assert lines[0] == "Usage by user, 2026-11-01 to 2026-11-30 (UTC, both included):"
    assert lines[1].split() == [
        "user",
        "requests",
        "prompt_tokens",
        "completion_tokens",
        "total_tokens",
        "cost",
    ]
    assert lines[2].split() == ["bob", "2", "1,250", "20", "1,270", "4.250000"]
    assert lines[3].split() == ["ann", "1", "1,500", "10", "1,510", "1.500000"]
    assert set(lines[4].replace(" ", "")) == {"-"}
    assert lines[5].split() == ["total", "3", "2,750", "30", "2,780", "5.750000"]


def test_usage_report_by_day_as_csv(usage):
    out = run(
        "usage_report",
        "--since",
        "2026-11-03",
        "--until",
        "2026-11-05",
        "--by",
        "day",
        "--csv",
    )
    rows = list(csv.reader(io.StringIO(out)))
    assert rows[0] == [
        "day",
        "requests",
        "prompt_tokens",
        "completion_tokens",
        "total_tokens",
        "cost",
    ]
    assert [r[:5] for r in rows[1:]] == [
        ["2026-11-03", "2", "1750", "20", "1770"],
        ["2026-11-04", "1", "1000", "10", "1010"],
        ["2026-11-05", "0", "0", "0", "0"],
        ["total", "3", "2750", "30", "2780"],
    ]


def test_usage_report_by_model_and_an_empty_range(usage):
    out = run(
        "usage_report",
        "--since",
        "2026-11-01",
        "--until",
        "2026-11-30",
        "--by",
        "model",
    )
    assert [line.split()[0] for line in out.splitlines()[2:4]] == ["m-b", "m-a"]
    empty = run("usage_report", "--since", "2020-01-01", "--until", "2020-01-02")
    assert "No usage in this range." in empty


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--since", "2026-11-31"], "The start date '2026-11-31' is not a date"),
        (["--since", "2026-11-05", "--until", "2026-11-01"], "is after the end date"),
    ],
)
def test_usage_report_fails_clearly_on_bad_dates(args, says):
    with pytest.raises(CommandError, match=says):
        run("usage_report", *args)


def test_usage_report_refuses_an_unknown_grouping():
    with pytest.raises(CommandError, match="invalid choice: 'pool'"):
        run("usage_report", "--by", "pool")
