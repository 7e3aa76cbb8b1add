"""A job's start on the worker: the engine runs beside the START round trip
(inference/worker.py ``_run_job``), and nothing it produces is written before the
``meta`` event, nor at all when the job turns out cancelled or already ended."""

import time

import pytest

from inference import client as inference_client
from inference import keys, worker
from inference.connections import redis_sync
from inference.engines.scripted import ScriptedEngine
from tests.inference.helpers import enqueue, terminal, wait_events, wait_until

# Prepended to the START script: Redis answers it 300 ms late (a slow round trip).
_SPIN_LUA = """
local t0 = redis.call('TIME')
repeat
  local t = redis.call('TIME')
until (t[1] - t0[1]) * 1000000 + (t[2] - t0[2]) >= 300000
"""


class RecordingEngine(ScriptedEngine):
    """A scripted engine that records when each job's generation began (epoch s) and
    which generations were closed."""

    def __init__(self, **options):
        super().__init__(**options)
        self.started_at: dict[str, float] = {}
        self.closed: list[str] = []

    async def generate(self, job):
        self.started_at[job.job_id] = time.time()
        try:
            async for item in super().generate(job):
                yield item
        finally:
            self.closed.append(job.job_id)


def _entry_s(entry_id: str) -> float:
    return int(entry_id.split("-")[0]) / 1000


def test_the_engine_runs_during_the_start_round_trip_its_tokens_after_meta(
    start_worker, monkeypatch
):
    monkeypatch.setattr(worker, "_START_LUA", _SPIN_LUA + worker._START_LUA)
    engine = RecordingEngine(text="one two")
    start_worker(engine)
    enqueue("overlap")
    events = wait_events("overlap", terminal)
    assert [e.type for e in events] == ["meta", "token", "token", "done"]
    raw = redis_sync().xrange(keys.gen_key("overlap"))
    meta_at = _entry_s(raw[0][0])
    # the engine began (and had its first token) while Redis ran the script
    assert meta_at - engine.started_at["overlap"] > 0.2
    assert "".join(e.data["t"] for e in events if e.type == "token") == "one two"


def test_a_job_cancelled_before_its_start_writes_no_token_of_the_early_run(
    start_worker, monkeypatch
):
    monkeypatch.setattr(worker, "_START_LUA", _SPIN_LUA + worker._START_LUA)
    enqueue("cancelled-early")
    inference_client.job_cancel(job_id="cancelled-early")
    engine = RecordingEngine(text="one two three")
    start_worker(engine)
    events = wait_events("cancelled-early", terminal)
    assert [e.type for e in events] == ["meta", "done"]
    done = events[-1].data
    assert done["finish_reason"] == "cancelled"
    assert done["usage"]["completion_tokens"] == 0
    assert done["ttft_ms"] is None
    # the early run was closed, then the job ran aborted
    assert engine.closed == ["cancelled-early", "cancelled-early"]


@pytest.mark.parametrize("slow_start", [False, True])
def test_a_job_ended_before_its_start_stops_the_engine_at_once(
    start_worker, monkeypatch, slow_start
):
    if slow_start:
        monkeypatch.setattr(worker, "_START_LUA", _SPIN_LUA + worker._START_LUA)
    enqueue("ended")
    assert inference_client.generation_fail(
        job_id="ended", code="queue_timeout", message="late"
    )
    # a long prompt: the engine's first token would come 5 s later
    engine = RecordingEngine(text="never", first_delay_ms=5000)
    handle = start_worker(engine)
    wait_until(lambda: handle.worker.jobs_done == 1, timeout_s=2)
    assert engine.closed == ["ended"]
    assert [e.type for e in inference_client.generation_events(job_id="ended")] == [
        "error"
    ]
