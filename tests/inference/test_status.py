"""`manage.py inference_status` and inference/selectors.py over real Redis."""

import io
import json

from django.core.management import call_command

from inference import client as inference_client
from inference.engines.scripted import ScriptedEngine
from inference.selectors import pool_status, pools_list
from tests.conftest import REAL_EMBEDDING_POOL
from tests.inference.helpers import (
    enqueue,
    heartbeat_at,
    wait_events,
    wait_heartbeats,
    wait_until,
)


def status_json(*args: str) -> dict:
    out = io.StringIO()
    call_command("inference_status", "--json", *args, stdout=out)
    return {s["pool"]: s for s in json.loads(out.getvalue())}


def test_status_reports_workers_slots_queue_depth_and_oldest_waiting_age(
    start_worker,
):
    handle = start_worker(
        ScriptedEngine(text="tok", cycle=True, delay_ms=10),
        pool="busy",
        concurrency=2,
    )
    jobs = [enqueue(f"job-{i}", pool="busy", max_tokens=5000) for i in range(3)]
    enqueue("orphan-job", pool="orphan")
    wait_events("job-1", lambda ev: len(ev) >= 2)
    # a heartbeat written with both jobs running, once job-2 has waited 0.5 s
    wait_heartbeats(handle.worker.worker_id)
    wait_until(
        lambda: heartbeat_at(handle.worker.worker_id) >= jobs[2].enqueued_at + 0.5
    )
    pools = status_json()
    assert set(pools) - {REAL_EMBEDDING_POOL} == {"busy", "orphan"}
    busy = pools["busy"]
    assert busy["live_workers"] == 1
    assert (busy["slots"], busy["busy"], busy["free"]) == (2, 2, 0)
    assert (busy["waiting"], busy["running"]) == (1, 2)
    assert 0.5 <= busy["oldest_waiting_s"] < 30
    assert busy["workers"][0]["engine"] == "scripted"
    orphan = pools["orphan"]
    assert (orphan["live_workers"], orphan["slots"], orphan["waiting"]) == (0, 0, 1)
    assert orphan["oldest_waiting_s"] is not None
    for i in range(3):
        inference_client.job_cancel(job_id=f"job-{i}")


def test_status_of_a_drained_pool_shows_free_slots_and_no_backlog(start_worker):
    handle = start_worker(ScriptedEngine(text="a b"), pool="idle", concurrency=3)
    enqueue("quick", pool="idle")
    wait_events("quick", lambda ev: bool(ev) and ev[-1].is_terminal)
    wait_until(lambda: handle.worker.jobs_done == 1)  # acknowledged
    # the second heartbeat from now began after the job's slot was freed
    wait_heartbeats(handle.worker.worker_id, n=2)
    status = pool_status(pool="idle")
    assert (status.live_workers, status.slots, status.busy, status.free) == (1, 3, 0, 3)
    assert (status.waiting, status.running, status.oldest_waiting_s) == (0, 0, None)
    assert [p for p in pools_list() if p != REAL_EMBEDDING_POOL] == ["idle"]


def test_status_table_names_each_pool_and_worker(start_worker):
    handle = start_worker(ScriptedEngine(), pool="table")
    out = io.StringIO()
    call_command("inference_status", stdout=out)
    text = out.getvalue()
    assert text.splitlines()[0].split()[:4] == ["pool", "kind", "workers", "busy"]
    assert any(line.startswith("table ") for line in text.splitlines())
    assert any(line.split()[:2] == ["table", "chat"] for line in text.splitlines())
    assert handle.worker.worker_id in text
