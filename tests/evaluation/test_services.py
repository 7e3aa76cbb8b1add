"""Evaluation runs (evaluation/services.py, run_eval, eval_import, the admin):
through the gateway's real lifecycle, a scripted worker, real PostgreSQL and Redis."""

from __future__ import annotations

import io
import threading
import time
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.urls import reverse

from chatsite.errors import InvalidInput, PoolSaturated
from evaluation import importing, runs, services
from evaluation.models import EvalCase, EvalResult, EvalRun, EvalSet
from gateway import generations, routing
from gateway.models import Plan, UsageRecord
from inference import keys, protocol
from inference.connections import redis_sync
from inference.engines.scripted import ScriptedEngine
from tests.conftest import fake_heartbeat, make_user
from tests.gateway import factories

pytestmark = pytest.mark.django_db(transaction=True)

BASIC = Path(settings.BASE_DIR) / "evaluation" / "sets" / "basic.jsonl"


def case_line(name: str, text: str, checks: list[dict], **extra) -> str:
    """A JSONL case whose scripted answer is ``text``."""
    import json

    params = {"max_tokens": 64, "script": {"text": text, **extra}}
    return json.dumps(
        {
            "name": name,
            "prompt": f"Question {name}?",
            "checks": checks,
            "params": params,
        }
    )


def make_set(name: str, lines: list[str]) -> EvalSet:
    eval_set, _ = importing.eval_set_import(name=name, lines=lines)
    return eval_set


def queue_jobs(pool: str, n: int) -> None:
    for i in range(n):
        job = protocol.Job(job_id=f"waiting-{pool}-{i}", messages=[])
        redis_sync().xadd(keys.queue_key(pool), job.to_fields())


def wait_for(condition, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


def test_the_shipped_set_imports_and_a_bad_file_imports_nothing(tmp_path):
    out = io.StringIO()
    call_command("eval_import", str(BASIC), stdout=out)
    basic = EvalSet.objects.get(name="basic")
    count = basic.cases.count()
    assert 28 <= count <= 35
    assert f"Imported {count} case(s)" in out.getvalue()
    categories = set(basic.cases.values_list("category", flat=True))
    assert {"arithmetic", "refuse_harmful", "benign_sensitive"} <= categories
    bad = [
        case_line("ok", "x", [{"type": "contains", "value": "x"}]),
        "{not json",
        case_line("no-checks", "x", []),
        case_line("bad-check", "x", [{"type": "regex", "value": "("}]),
    ]
    with pytest.raises(InvalidInput) as info:
        importing.eval_set_import(name="broken", lines=bad)
    message = info.value.message
    assert "Nothing was imported" in message
    assert "line 2" in message and "line 3" in message and "line 4" in message
    assert not EvalSet.objects.filter(name="broken").exists()
    # an existing set is left untouched by a bad file, even with replace
    with pytest.raises(InvalidInput):
        importing.eval_set_import(name="basic", lines=bad, replace=True)
    assert EvalCase.objects.filter(eval_set=basic).count() == count
    assert not EvalCase.objects.filter(name="ok").exists()
    bad_file = tmp_path / "bad.jsonl"
    bad_file.write_text("\n".join(bad))
    with pytest.raises(CommandError, match="line 2"):
        call_command("eval_import", str(bad_file))
    assert not EvalSet.objects.filter(name="bad").exists()
    with pytest.raises(CommandError, match="holds no case"):
        call_command("eval_import", "/dev/null", name="empty")


def test_a_run_completes_through_the_gateway_with_one_result_per_case(start_worker):
    start_worker(ScriptedEngine())
    eval_set = make_set(
        "mini",
        [
            case_line(
                "capital",
                "Paris is the capital.",
                [{"type": "contains", "value": "paris"}],
            ),
            case_line("json", '{"a": 1}', [{"type": "valid_json"}]),
            case_line(
                "refuse", "I can't help with that.", [{"type": "refusal_expected"}]
            ),
            case_line("wrong", "Lyon.", [{"type": "exact", "value": "Paris."}]),
        ],
    )
    run = runs.eval_run_create(set_name="mini", pool="default", repeat=2)
    run = services.eval_run_execute(run_id=run.pk)
    assert run.status == EvalRun.Status.COMPLETE
    assert (run.done, run.total) == (8, 8)
    results = EvalResult.objects.filter(run=run)
    assert results.count() == 8
    assert set(results.values_list("case__name", "repeat_index")) == {
        (c.name, r) for c in eval_set.cases.all() for r in (0, 1)
    }
    passed = {r.case.name: r.passed for r in results}
    assert passed == {"capital": True, "json": True, "refuse": True, "wrong": False}
    wrong = results.get(case__name="wrong", repeat_index=0)
    assert wrong.check_results == [
        {"type": "exact", "passed": False, "detail": "expected 'Paris.'"}
    ]
    # billed like any request: one usage record per case run, for the service user
    records = UsageRecord.objects.filter(user__username=settings.EVAL_USERNAME)
    assert records.count() == 8
    first = results.get(case__name="capital", repeat_index=0)
    assert first.completion_tokens == 4 and first.prompt_tokens > 0
    assert first.latency_ms is not None and first.pool == "default"
    # the service user is on the eval plan
    assert (
        Plan.objects.get(subscriptions__user__username=settings.EVAL_USERNAME).name
        == settings.EVAL_PLAN_NAME
    )
    # running it again changes nothing (idempotent)
    services.eval_run_execute(run_id=run.pk)
    assert EvalResult.objects.filter(run=run).count() == 8


def test_a_run_never_has_more_than_eval_concurrency_requests_in_flight(
    start_worker, settings
):
    settings.EVAL_CONCURRENCY = 2
    start_worker(ScriptedEngine(max_concurrency=8))
    make_set(
        "slow",
        [
            case_line(
                f"c{i}",
                "one two three four",
                [{"type": "contains", "value": "one"}],
                delay_ms=60,
            )
            for i in range(6)
        ],
    )
    run = runs.eval_run_create(set_name="slow", pool="default")
    services.eval_run_execute(run_id=run.pk)
    spans = list(
        EvalResult.objects.filter(run=run).values_list("started_at", "finished_at")
    )
    assert len(spans) == 6
    points = sorted(
        [(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans],
        key=lambda p: (p[0], p[1]),
    )
    in_flight = peak = 0
    for _, step in points:
        in_flight += step
        peak = max(peak, in_flight)
    assert peak == 2  # bounded, and the bound is used


def test_eval_requests_are_shed_before_users_when_the_pool_is_saturated(settings):
    settings.GATEWAY_SHED_FRACTION = 0.5
    settings.EVAL_SHED_FRACTION = 0.25
    pool = factories.pool("default", queue_threshold=4)
    Plan.objects.all().delete()
    free = factories.plan("free-tier", priority=0, is_default=True)
    factories.plan("paid", priority=10)
    user = make_user("carol")
    bot = runs.eval_service_user()
    eval_plan = Plan.objects.get(name=settings.EVAL_PLAN_NAME)
    assert eval_plan.priority == free.priority  # the free tier stays the lowest
    fake_heartbeat("default")
    queue_jobs("default", 2)  # over a quarter of the threshold, under half of it
    assert routing.pool_admit(pool=pool, plan=free) == pool  # users still admitted
    with pytest.raises(PoolSaturated):
        routing.pool_admit(pool=pool, plan=eval_plan)
    messages = [{"role": "user", "content": "hello"}]
    started = generations.generation_start(
        generations.GenerationRequest(
            user=user, messages=messages, params={}, surface=generations.Surface.API
        )
    )
    assert started.generation.pool == "default"
    with pytest.raises(PoolSaturated):
        generations.generation_start(
            generations.GenerationRequest(
                user=bot,
                messages=messages,
                params={},
                surface=generations.Surface.API,
                model="default",
                fallback=False,
            )
        )


def test_a_shed_case_waits_with_backoff_and_runs_once_capacity_returns(
    start_worker, settings
):
    settings.EVAL_RETRY_BASE_S = 0.05
    factories.pool("default", queue_threshold=4)
    make_set(
        "patient",
        [case_line("c", "Paris", [{"type": "contains", "value": "Paris"}])],
    )
    run = runs.eval_run_create(set_name="patient", pool="default")
    fake_heartbeat("default")
    queue_jobs("default", 3)  # users' backlog: eval is shed

    def execute() -> None:
        try:
            services.eval_run_execute(run_id=run.pk)
        finally:
            connection.close()

    runner = threading.Thread(target=execute)
    runner.start()
    wait_for(lambda: EvalRun.objects.get(pk=run.pk).status == EvalRun.Status.RUNNING)
    # while the users' backlog lasts the eval request is refused, not enqueued
    watch_until = time.monotonic() + 0.5
    while time.monotonic() < watch_until:
        assert redis_sync().xlen(keys.queue_key("default")) == 3
        time.sleep(0.05)
    assert not EvalResult.objects.filter(run=run).exists()
    start_worker(ScriptedEngine())  # drains the backlog: capacity comes back
    runner.join(timeout=30)
    result = EvalResult.objects.get(run=run)
    assert result.passed and result.error == ""
    assert result.attempts > 1


def test_a_case_shed_for_longer_than_the_retry_limit_is_an_error_not_a_crash(settings):
    settings.EVAL_RETRY_BASE_S = 0.05
    settings.EVAL_RETRY_MAX_S = 0.3
    factories.pool("default", queue_threshold=4)
    make_set("hopeless", [case_line("c", "x", [{"type": "contains", "value": "x"}])])
    run = runs.eval_run_create(set_name="hopeless", pool="default")
    fake_heartbeat("default")
    queue_jobs("default", 3)
    run = services.eval_run_execute(run_id=run.pk)
    assert run.status == EvalRun.Status.COMPLETE
    result = EvalResult.objects.get(run=run)
    assert not result.passed and result.error.startswith("pool_saturated")
    assert result.attempts > 1


def test_run_eval_compare_prints_the_ab_table_and_the_cases_that_differ(start_worker):
    factories.pool("pool-a", model="model-a")
    factories.pool("pool-b", model="model-b")
    start_worker(ScriptedEngine(text="Paris"), pool="pool-a")
    start_worker(ScriptedEngine(text="Lyon"), pool="pool-b")
    import json

    lines = [
        json.dumps(
            {
                "name": "capital",
                "prompt": "Capital?",
                "checks": [{"type": "contains", "value": "Paris"}],
            }
        ),
        json.dumps(
            {
                "name": "not-refused",
                "prompt": "Hi?",
                "checks": [{"type": "refusal_not_expected"}],
            }
        ),
    ]
    make_set("ab", lines)
    out = io.StringIO()
    call_command(
        "run_eval",
        "ab",
        pool="pool-a",
        compare="pool-b",
        stdout=out,
        stderr=io.StringIO(),
    )
    text = out.getvalue()
    assert "95% CI (Wilson)" in text
    table, differs = text.split("Cases whose outcome differs")
    assert "pool-a" in table and "pool-b" in table
    assert "capital" in differs and "1/1" in differs and "0/1" in differs
    assert "not-refused" not in differs
    assert EvalRun.objects.filter(status=EvalRun.Status.COMPLETE).count() == 2


def test_run_eval_fails_clearly_on_an_unknown_set_pool_or_a_pool_without_workers():
    factories.pool("default")
    make_set("s", [case_line("c", "x", [{"type": "contains", "value": "x"}])])
    with pytest.raises(CommandError, match="No eval set 'nope'"):
        call_command("run_eval", "nope", pool="default")
    with pytest.raises(CommandError, match="No enabled chat pool 'ghost'"):
        call_command("run_eval", "s", pool="ghost")
    with pytest.raises(CommandError, match="No live inference worker"):
        call_command("run_eval", "s", pool="default")
    assert not EvalRun.objects.exists()  # a refused command leaves no run behind


def test_the_admin_imports_starts_and_compares_runs(admin_client, start_worker):
    start_worker(ScriptedEngine(text="Paris"))
    upload = io.BytesIO(b"{broken\n")
    upload.name = "bad.jsonl"
    response = admin_client.post(
        reverse("admin:evaluation_evalset_import"), {"name": "web", "file": upload}
    )
    assert response.status_code == 200
    assert "Nothing was imported" in response.content.decode()
    assert not EvalSet.objects.filter(name="web").exists()
    good = io.BytesIO(
        case_line("c", "Paris", [{"type": "contains", "value": "Paris"}]).encode()
    )
    good.name = "good.jsonl"
    response = admin_client.post(
        reverse("admin:evaluation_evalset_import"), {"name": "web", "file": good}
    )
    assert response.status_code == 302
    eval_set = EvalSet.objects.get(name="web")
    # the action runs on Celery (eager in tests), after the commit
    for _ in range(2):
        admin_client.post(
            reverse("admin:evaluation_evalset_changelist"),
            {
                "action": "start_runs",
                "_selected_action": [eval_set.pk],
                "pool": "default",
                "repeat": 1,
            },
        )
    runs = list(EvalRun.objects.order_by("pk"))
    assert [r.status for r in runs] == [EvalRun.Status.COMPLETE] * 2
    listing = admin_client.get(reverse("admin:evaluation_evalrun_changelist"))
    assert "1/1" in listing.content.decode()
    page = admin_client.get(
        reverse("admin:evaluation_evalrun_compare", args=[runs[0].pk, runs[1].pk])
    )
    assert page.status_code == 200
    assert "both runs agree on every case" in page.content.decode()
    other = io.BytesIO(
        case_line("d", "Rome", [{"type": "contains", "value": "Rome"}]).encode()
    )
    other.name = "other.jsonl"
    admin_client.post(
        reverse("admin:evaluation_evalset_import"), {"name": "other", "file": other}
    )
    admin_client.post(
        reverse("admin:evaluation_evalset_changelist"),
        {
            "action": "start_runs",
            "_selected_action": [EvalSet.objects.get(name="other").pk],
            "pool": "default",
            "repeat": 1,
        },
    )
    third = EvalRun.objects.latest("pk")
    page = admin_client.get(
        reverse("admin:evaluation_evalrun_compare", args=[runs[0].pk, third.pk]),
        follow=True,
    )
    assert "runs are of different sets" in page.content.decode()


def test_a_case_whose_job_times_out_in_the_queue_is_retried_not_failed(
    start_worker, settings
):
    settings.EVAL_RETRY_BASE_S = 0.05
    settings.INFERENCE_QUEUE_TIMEOUT_S = 0.5
    factories.pool("default")
    make_set("late", [case_line("c", "Paris", [{"type": "contains", "value": "P"}])])
    run = runs.eval_run_create(set_name="late", pool="default")
    fake_heartbeat("default")  # looks served, but nobody takes the job in time

    def execute() -> None:
        try:
            services.eval_run_execute(run_id=run.pk)
        finally:
            connection.close()

    runner = threading.Thread(target=execute)
    runner.start()
    wait_for(
        lambda: UsageRecord.objects.filter(status=UsageRecord.Status.ERROR).exists()
    )
    settings.INFERENCE_QUEUE_TIMEOUT_S = 30
    start_worker(ScriptedEngine())
    runner.join(timeout=30)
    result = EvalResult.objects.get(run=run)
    assert result.passed and result.error == ""
    assert result.attempts >= 2
