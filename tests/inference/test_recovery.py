"""Crash recovery in inference/worker.py: jobs of dead workers are reclaimed.

A dead worker is simulated by a "ghost" consumer that read a job from the group and
never sent a heartbeat (the real kill -9 runs are in test_worker_processes.py).
"""

from inference import keys, protocol
from inference.connections import redis_sync
from inference.engines.scripted import ScriptedEngine
from tests.inference.helpers import (
    enqueue,
    queue_drained,
    terminal,
    wait_events,
    wait_until,
)

FAST_RECLAIM = {"reclaim_s": 0.2, "worker_ttl_s": 2.0}


def ghost_takes(job_id: str, *, pool: str = "default", tokens: list[str] = ()) -> str:
    """Deliver the queued job to a consumer that then 'dies' after emitting ``tokens``."""
    r = redis_sync()
    queue = keys.queue_key(pool)
    try:
        r.xgroup_create(queue, protocol.GROUP, id="0", mkstream=True)
    except Exception:  # noqa: BLE001 - group exists
        pass
    [(_key, [(entry_id, _fields)])] = r.xreadgroup(
        protocol.GROUP, "ghost", {queue: ">"}, count=1
    )
    r.xadd(
        keys.gen_key(job_id),
        protocol.event_fields(
            protocol.EVENT_META, {"model": "m", "worker": "ghost", "queue_ms": 1}
        ),
    )
    for text in tokens:
        r.xadd(keys.gen_key(job_id), protocol.token_fields(text))
    return entry_id


def test_job_lost_before_its_first_token_is_retried_once_and_completes(start_worker):
    enqueue("lost-early", script={"text": "alpha beta gamma"})
    ghost_takes("lost-early")
    handle = start_worker(ScriptedEngine(), **FAST_RECLAIM)
    events = wait_events("lost-early", terminal, timeout=15)
    assert [e.type for e in events] == [
        "meta",
        "meta",
        "token",
        "token",
        "token",
        "done",
    ]
    assert events[1].data["worker"] == handle.worker.worker_id
    assert "".join(e.data["t"] for e in events if e.type == "token") == (
        "alpha beta gamma"
    )
    assert redis_sync().get(keys.attempts_key("lost-early")) == "1"
    # several more recovery scans after the job ended: none runs it again
    scans = handle.worker.reclaim_scans
    wait_until(lambda: handle.worker.reclaim_scans >= scans + 3)
    assert len(wait_events("lost-early", terminal)) == len(events)
    assert handle.worker.jobs_reclaimed == 1
    assert queue_drained()
    consumers = redis_sync().xinfo_consumers(keys.queue_key("default"), "workers")
    assert [c["name"] for c in consumers] == [handle.worker.worker_id]


def test_job_lost_after_tokens_ends_with_worker_lost_and_keeps_its_partial_text(
    start_worker,
):
    job = enqueue("lost-late", script={"text": "never generated again"})
    ghost_takes("lost-late", tokens=["Partial", " answer"])
    start_worker(ScriptedEngine(), **FAST_RECLAIM)
    events = wait_events("lost-late", terminal, timeout=15)
    assert [e.type for e in events] == ["meta", "token", "token", "error"]
    assert events[-1].data["code"] == protocol.ERROR_WORKER_LOST
    assert "".join(e.data["t"] for e in events if e.type == "token") == (
        "Partial answer"
    )
    # what was spent, for billing: the prompt by this pool's engine, 2 token events
    assert events[-1].data["usage"] == {
        "prompt_tokens": ScriptedEngine().count_tokens(job.messages),
        "completion_tokens": 2,
        "cached_tokens": 0,
    }
    assert queue_drained()


def test_a_retried_job_that_loses_its_worker_again_is_not_retried_twice(
    start_worker,
):
    enqueue("lost-twice", script={"text": "x y"})
    ghost_takes("lost-twice")
    redis_sync().set(keys.attempts_key("lost-twice"), protocol.MAX_RETRIES)
    start_worker(ScriptedEngine(), **FAST_RECLAIM)
    events = wait_events("lost-twice", terminal, timeout=15)
    assert [e.type for e in events] == ["meta", "error"]
    assert events[-1].data["code"] == protocol.ERROR_WORKER_LOST
    assert events[-1].data["usage"] is None  # no token: nothing spent


def test_a_job_that_ended_before_its_ack_was_lost_is_only_acknowledged(start_worker):
    enqueue("ended", script={"text": "x"})
    ghost_takes("ended", tokens=["x"])
    r = redis_sync()
    r.set(keys.final_key("ended"), "1")
    r.xadd(
        keys.gen_key("ended"),
        protocol.event_fields(
            protocol.EVENT_DONE,
            {
                "finish_reason": "stop",
                "usage": {
                    "prompt_tokens": 1,
                    "completion_tokens": 1,
                    "cached_tokens": 0,
                },
                "ttft_ms": 1,
                "latency_ms": 2,
            },
        ),
    )
    start_worker(ScriptedEngine(), **FAST_RECLAIM)
    assert queue_drained(), "the orphaned entry was not acknowledged"
    assert [e.type for e in wait_events("ended", terminal)] == ["meta", "token", "done"]


def test_two_reclaiming_workers_handle_each_lost_job_exactly_once(start_worker):
    for i in range(4):
        enqueue(f"race-{i}", script={"text": "one two"})
        ghost_takes(f"race-{i}")
    first = start_worker(ScriptedEngine(), **FAST_RECLAIM)
    second = start_worker(ScriptedEngine(), **FAST_RECLAIM)
    for i in range(4):
        events = wait_events(f"race-{i}", terminal, timeout=15)
        assert [e.type for e in events] == ["meta", "meta", "token", "token", "done"]
        assert redis_sync().get(keys.attempts_key(f"race-{i}")) == "1"
    assert first.worker.jobs_reclaimed + second.worker.jobs_reclaimed == 4


def test_a_live_workers_long_job_is_never_stolen(start_worker):
    slow = start_worker(
        ScriptedEngine(text=" ".join(["tok"] * 80), delay_ms=50),
        **FAST_RECLAIM,
        concurrency=1,
    )
    enqueue("long")
    wait_events("long", lambda ev: len(ev) >= 2)
    other = start_worker(ScriptedEngine(), **FAST_RECLAIM)
    events = wait_events("long", terminal, timeout=20)
    assert [e.type for e in events].count("meta") == 1
    assert events[0].data["worker"] == slow.worker.worker_id
    assert events[-1].type == "done" and events[-1].data["finish_reason"] == "stop"
    assert sum(e.type == "token" for e in events) == 80
    assert other.worker.jobs_reclaimed == 0 and slow.worker.jobs_reclaimed == 0
