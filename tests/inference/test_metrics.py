"""inference/metrics.py recorded by the worker, and the /metrics view."""

import os
import time
from pathlib import Path

import pytest
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from inference import client as inference_client
from inference import metrics
from inference.engines.scripted import ScriptedEngine
from inference.metrics import metrics_render
from tests.inference.helpers import enqueue, terminal, wait_events

LABELS = {"model_name": "scripted-1", "pool": "metrics"}


def samples() -> dict[tuple, float]:
    body, _ = metrics_render()
    found = {}
    for family in text_string_to_metric_families(body.decode()):
        for s in family.samples:
            found[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return found


def value(snapshot: dict, name: str, **labels: str) -> float:
    key = (name, tuple(sorted({**LABELS, **labels}.items())))
    return snapshot.get(key, 0.0)


def running_drops_to(expected: float, timeout: float = 5.0) -> bool:
    """Poll the running gauge (it drops just after the terminal event is written)."""
    deadline = time.time() + timeout
    while value(samples(), "vllm:num_requests_running") != expected:
        if time.time() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_a_job_shows_in_token_counters_and_latency_histograms(start_worker):
    start_worker(ScriptedEngine(text="one two three four", delay_ms=5), pool="metrics")
    before = samples()
    enqueue("m-1", pool="metrics")
    events = wait_events("m-1", terminal)
    usage = events[-1].data["usage"]
    after = samples()

    def grew(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert grew("vllm:generation_tokens_total") == 4
    assert grew("vllm:prompt_tokens_total") == usage["prompt_tokens"] > 0
    assert grew("vllm:request_success_total", finished_reason="stop") == 1
    assert grew("vllm:time_to_first_token_seconds_count") == 1
    assert grew("vllm:e2e_request_latency_seconds_count") == 1
    assert grew("vllm:request_queue_time_seconds_count") == 1
    assert grew("vllm:inter_token_latency_seconds_count") == 3
    assert grew("vllm:inter_token_latency_seconds_sum") >= 3 * 0.004
    assert grew("vllm:e2e_request_latency_seconds_sum") >= grew(
        "vllm:time_to_first_token_seconds_sum"
    )
    assert running_drops_to(0)


def test_running_gauge_and_aborts_counter_follow_a_cancelled_job(start_worker):
    start_worker(ScriptedEngine(text="t", cycle=True, delay_ms=10), pool="metrics")
    before = samples()
    enqueue("m-cancel", pool="metrics", max_tokens=5000)
    wait_events("m-cancel", lambda ev: len(ev) >= 3)
    assert value(samples(), "vllm:num_requests_running") == 1
    inference_client.job_cancel(job_id="m-cancel")
    wait_events("m-cancel", terminal)
    after = samples()
    aborted = "inference:requests_aborted_total"
    assert value(after, aborted) - value(before, aborted) == 1
    assert running_drops_to(0)


def test_error_counter_counts_engine_failures_by_code(start_worker):
    start_worker(ScriptedEngine(text="a b c"), pool="metrics")
    name = "inference:request_errors_total"
    before = value(samples(), name, code="engine_error")
    enqueue("m-fail", pool="metrics", script={"fail_after": 1})
    wait_events("m-fail", terminal)
    deadline = time.time() + 5  # counted just after the error event is written
    while value(samples(), name, code="engine_error") - before != 1:
        assert time.time() < deadline
        time.sleep(0.02)


@pytest.mark.django_db
def test_metrics_view_serves_loopback_and_staff_and_refuses_others(
    django_user_model, settings
):
    settings.METRICS_TOKEN = "s3cret"
    metrics.TIME_TO_FIRST_TOKEN.labels(model_name="m", pool="view").observe(0.25)
    response = Client().get("/metrics")  # the test client comes from 127.0.0.1
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    assert (
        b'vllm:time_to_first_token_seconds_bucket{le="0.25",model_name="m",pool="view"}'
        in response.content
    )
    remote = Client(REMOTE_ADDR="203.0.113.9")
    assert remote.get("/metrics").status_code == 403
    assert remote.get("/metrics", HTTP_AUTHORIZATION="Bearer nope").status_code == 403
    assert remote.get("/metrics", HTTP_AUTHORIZATION="Bearer s3cret").status_code == 200
    plain = django_user_model.objects.create_user(username="u", password="pw-u-123")
    remote.force_login(plain)
    assert remote.get("/metrics").status_code == 403
    staff = django_user_model.objects.create_user(
        username="ops", password="pw-ops-123", is_staff=True
    )
    remote.force_login(staff)
    assert remote.get("/metrics").status_code == 200


def test_waiting_gauge_shows_the_pools_backlog(start_worker):
    start_worker(
        ScriptedEngine(text="t", cycle=True, delay_ms=10),
        pool="metrics",
        concurrency=1,
    )
    for i in range(3):
        enqueue(f"m-wait-{i}", pool="metrics", max_tokens=5000)
    wait_events("m-wait-0", lambda ev: len(ev) >= 2)
    deadline = time.time() + 5
    waiting = ("vllm:num_requests_waiting", (("pool", "metrics"),))
    while samples().get(waiting) != 2:
        assert time.time() < deadline, samples().get(waiting)
        time.sleep(0.05)
    for i in range(3):
        inference_client.job_cancel(job_id=f"m-wait-{i}")


def test_an_embedding_batch_shows_in_the_batch_size_histogram_and_counters(
    start_embedding_worker,
):
    from inference.embeddings import embed_texts
    from tests.inference.test_embeddings import CountingEngine

    start_embedding_worker(CountingEngine(), pool="metrics-embed")
    labels = {"model_name": "counting-test", "pool": "metrics-embed"}

    def get(snapshot: dict, name: str, **extra: str) -> float:
        return snapshot.get((name, tuple(sorted({**labels, **extra}.items()))), 0.0)

    before = samples()
    result = embed_texts(["one", "two", "three"], pool="metrics-embed")
    after = samples()
    assert (
        get(after, "inference:embedding_batch_texts_sum")
        - get(before, "inference:embedding_batch_texts_sum")
        == 3
    )
    assert (
        get(after, "vllm:request_success_total", finished_reason="embedding")
        - get(before, "vllm:request_success_total", finished_reason="embedding")
        == 1
    )
    assert (
        get(after, "vllm:prompt_tokens_total") - get(before, "vllm:prompt_tokens_total")
        == result.tokens
    )


def test_an_empty_file_of_a_killed_process_does_not_break_the_scrape(start_worker):
    # prometheus_client creates a process's file before sizing it: a process killed
    # in between leaves it empty (the SIGTERM drill of test_worker_processes failed
    # on one under load with struct.error).
    start_worker(ScriptedEngine(text="one two", delay_ms=5), pool="metrics")
    before = samples()
    left = Path(os.environ["PROMETHEUS_MULTIPROC_DIR"]) / "counter_4194999.db"
    left.touch()
    try:
        enqueue("m-empty", pool="metrics")
        wait_events("m-empty", terminal)
        after = samples()
    finally:
        left.unlink()
    assert value(after, "vllm:generation_tokens_total") == (
        value(before, "vllm:generation_tokens_total") + 2
    )
