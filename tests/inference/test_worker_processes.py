"""Real `manage.py run_inference_worker --engine scripted` processes: kill -9 and SIGTERM.

Workers run with fast timings (heartbeat 0.3 s, dead after 2 s, recovery scan every
0.5 s) through the environment, against the test Redis database.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.conf import settings
from prometheus_client.parser import text_string_to_metric_families

from inference import client as inference_client
from inference import keys, protocol
from inference.connections import redis_sync
from inference.metrics import metrics_render
from tests.inference.helpers import (
    enqueue,
    queue_drained,
    terminal,
    wait_events,
    wait_until,
    worker_state,
)

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parent.parent.parent


class WorkerProcess:
    """One worker process of ``pool``; ``worker_id`` is read from its heartbeat."""

    def __init__(self, pool: str, *args: str) -> None:
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "chatsite.settings.test",
            "TEST_REDIS_URL": settings.REDIS_URL,
            "INFERENCE_HEARTBEAT_S": "0.3",
            "INFERENCE_WORKER_TTL_S": "2",
            "INFERENCE_RECLAIM_S": "0.5",
            "PYTHONUNBUFFERED": "1",
        }
        known = set(redis_sync().zrange(keys.workers_key(pool), 0, -1))
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "manage.py",
                "run_inference_worker",
                "--pool",
                pool,
                "--engine",
                "scripted",
                *args,
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        deadline = time.time() + 60
        while True:
            new = set(redis_sync().zrange(keys.workers_key(pool), 0, -1)) - known
            if new:
                (self.worker_id,) = new
                break
            if self.proc.poll() is not None or time.time() > deadline:
                self.proc.kill()
                raise RuntimeError(f"worker did not start: {self.proc.stdout.read()}")
            time.sleep(0.05)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)


@pytest.fixture
def spawn():
    procs: list[WorkerProcess] = []

    def _spawn(pool: str, *args: str) -> WorkerProcess:
        proc = WorkerProcess(pool, *args)
        procs.append(proc)
        return proc

    yield _spawn
    for proc in procs:
        proc.close()


def tokens_text(events: list[protocol.Event]) -> str:
    return "".join(e.data["t"] for e in events if e.type == "token")


def reclaim_scans(worker_id: str) -> int:
    """Crash-recovery scans the worker had done at its last heartbeat."""
    return int(worker_state(worker_id).get("reclaim_scans", 0))


def stopping(worker_id: str) -> bool:
    """True once the worker's heartbeat says it handled a stop (takes no new job)."""
    return worker_state(worker_id).get("stopping") == "1"


def test_kill_9_before_the_first_token_the_job_is_retried_and_completes_once(spawn):
    stuck = spawn("crash-a", "--delay-ms", "5000")  # would wait 5 s per token
    enqueue("crash-early", pool="crash-a", script={"text": "alpha beta gamma"})
    events = wait_events("crash-early", lambda ev: len(ev) >= 1, timeout=20)
    assert events[0].data["worker"] == stuck.worker_id
    # Killed before the rescuer starts: a rescuer slow to start (a busy machine) must
    # not give the stuck worker time to emit its first token.
    stuck.proc.send_signal(signal.SIGKILL)
    stuck.proc.wait(timeout=10)
    rescuer = spawn("crash-a", "--delay-ms", "10")
    events = wait_events("crash-early", terminal, timeout=30)
    assert [e.type for e in events] == [
        "meta",
        "meta",
        "token",
        "token",
        "token",
        "done",
    ]
    assert events[1].data["worker"] == rescuer.worker_id
    assert tokens_text(events) == "alpha beta gamma"
    assert events[-1].data["finish_reason"] == "stop"
    # more recovery scans after the job ended: none runs it a second time
    scans = reclaim_scans(rescuer.worker_id)
    wait_until(lambda: reclaim_scans(rescuer.worker_id) >= scans + 3, timeout_s=15)
    assert len(wait_events("crash-early", terminal)) == len(events)
    assert queue_drained("crash-a")


def test_kill_9_mid_answer_ends_the_job_with_worker_lost_and_keeps_the_partial(spawn):
    text = " ".join(f"w{i}" for i in range(40))
    dying = spawn("crash-b", "--delay-ms", "150")
    enqueue("crash-late", pool="crash-b", script={"text": text})
    wait_events(
        "crash-late", lambda ev: sum(e.type == "token" for e in ev) >= 3, timeout=20
    )
    dying.proc.send_signal(signal.SIGKILL)  # before the rescuer starts, as above
    dying.proc.wait(timeout=10)
    rescuer = spawn("crash-b", "--delay-ms", "10")
    events = wait_events("crash-late", terminal, timeout=30)
    kinds = [e.type for e in events]
    assert kinds.count("meta") == 1 and kinds[-1] == "error"
    assert events[-1].data["code"] == protocol.ERROR_WORKER_LOST
    partial = tokens_text(events)
    assert len(partial.split()) >= 3 and text.startswith(partial)
    assert partial != text
    assert queue_drained("crash-b")
    assert rescuer.proc.poll() is None


def _counter(name: str, **labels: str) -> float:
    body, _ = metrics_render()
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            if sample.name == name and all(
                sample.labels.get(k) == v for k, v in labels.items()
            ):
                return sample.value
    return 0.0


def test_sigterm_finishes_the_running_answer_takes_no_new_job_and_exits_0(spawn):
    text = " ".join(f"w{i}" for i in range(20))
    worker = spawn("drain", "--delay-ms", "100")
    enqueue("draining", pool="drain", script={"text": text})
    wait_events("draining", lambda ev: sum(e.type == "token" for e in ev) >= 2)
    worker.proc.send_signal(signal.SIGTERM)
    wait_until(lambda: stopping(worker.worker_id))
    enqueue("after-stop", pool="drain", script={"text": "should not run"})
    assert worker.proc.wait(timeout=30) == 0
    events = wait_events("draining", terminal)
    assert events[-1].type == "done" and events[-1].data["finish_reason"] == "stop"
    assert tokens_text(events) == text
    assert redis_sync().xrange(keys.gen_key("after-stop")) == []
    queue = keys.queue_key("drain")
    assert redis_sync().xlen(queue) == 1
    assert redis_sync().xpending(queue, protocol.GROUP)["pending"] == 0
    assert "drained, 1 jobs served" in worker.proc.stdout.read()
    # The worker process's samples reach /metrics through the multiprocess folder.
    assert _counter(
        "vllm:generation_tokens_total", model_name="scripted-1", pool="drain"
    ) == pytest.approx(20)


def test_a_second_sigterm_cancels_the_running_answer_and_exits_at_once(spawn):
    worker = spawn("abort", "--delay-ms", "200")
    text = " ".join(f"w{i}" for i in range(200))  # 40 s at 200 ms a token
    enqueue("aborted", pool="abort", script={"text": text})
    wait_events("aborted", lambda ev: sum(e.type == "token" for e in ev) >= 2)
    worker.proc.send_signal(signal.SIGTERM)
    # the first signal was handled (draining) before the second is sent: two
    # signals arriving together may be delivered as one
    wait_until(lambda: stopping(worker.worker_id))
    worker.proc.send_signal(signal.SIGTERM)
    assert worker.proc.wait(timeout=15) == 0
    events = wait_events("aborted", terminal)
    assert events[-1].type == "done"
    assert events[-1].data["finish_reason"] == "cancelled"
    assert 2 <= sum(e.type == "token" for e in events) < 200
    assert queue_drained("abort")


def _served_by(job_id: str) -> list[str]:
    """The worker of each ``meta`` event of a job (a retried job has two)."""
    return [
        e.data["worker"]
        for e in inference_client.generation_events(job_id=job_id)
        if e.type == protocol.EVENT_META
    ]


def test_two_workers_on_one_pool_both_serve_jobs_and_each_job_runs_once(spawn):
    # Three slots each, ten jobs of about 1 s: neither worker can take them all.
    first = spawn("spread", "--delay-ms", "100", "--concurrency", "3")
    second = spawn("spread", "--delay-ms", "100", "--concurrency", "3")
    text = " ".join(f"w{i}" for i in range(10))
    jobs = [f"spread-{n}" for n in range(10)]
    for job_id in jobs:
        enqueue(job_id, pool="spread", script={"text": text})
    for job_id in jobs:
        events = wait_events(job_id, terminal, timeout=60)
        assert events[-1].type == "done" and tokens_text(events) == text
    served = {job_id: _served_by(job_id) for job_id in jobs}
    assert all(len(workers) == 1 for workers in served.values()), served
    per_worker = [
        sum(workers == [proc.worker_id] for workers in served.values())
        for proc in (first, second)
    ]
    assert sum(per_worker) == 10 and min(per_worker) >= 1, per_worker
    assert queue_drained("spread")


def test_killing_one_of_two_workers_ends_every_job_once_and_loses_none(spawn):
    # Ten jobs of 3 s on 2 x 3 slots: at the kill the victim runs jobs with tokens out
    # (they end worker_lost, partial kept) and jobs still wait in the queue (the
    # survivor serves them); nothing is left without a terminal event.
    victim = spawn("failover", "--delay-ms", "100", "--concurrency", "3")
    survivor = spawn("failover", "--delay-ms", "100", "--concurrency", "3")
    text = " ".join(f"w{i}" for i in range(30))
    jobs = [f"failover-{n}" for n in range(10)]
    for job_id in jobs:
        enqueue(job_id, pool="failover", script={"text": text}, deadline_in=120)

    def victim_streaming() -> bool:
        return any(
            _served_by(job_id) == [victim.worker_id]
            and "w1" in tokens_text(inference_client.generation_events(job_id=job_id))
            for job_id in jobs
        )

    wait_until(victim_streaming, timeout_s=30)
    victim.proc.send_signal(signal.SIGKILL)
    victim.proc.wait(timeout=10)
    outcomes = {}
    for job_id in jobs:
        events = wait_events(job_id, terminal, timeout=90)
        assert sum(e.is_terminal for e in events) == 1, [e.type for e in events]
        outcomes[job_id] = (events[-1], _served_by(job_id), tokens_text(events))
    lost = [j for j, (end, _, _) in outcomes.items() if end.type == "error"]
    assert lost, "the victim had answers in progress"
    for end, workers, partial in outcomes.values():
        if end.type == "error":
            assert end.data["code"] == protocol.ERROR_WORKER_LOST
            assert workers == [victim.worker_id] and text.startswith(partial)
        else:  # served by the survivor, or retried on it (no token out at the kill)
            assert end.data["finish_reason"] == "stop" and partial == text
    assert any(workers == [survivor.worker_id] for _, workers, _ in outcomes.values())
    assert queue_drained("failover", timeout=20)
    assert survivor.proc.poll() is None
