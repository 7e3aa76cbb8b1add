"""The inference worker over real Redis (inference/worker.py)."""

import logging
import time

from inference import client as inference_client
from inference import keys, liveness, protocol
from inference.connections import redis_sync
from inference.engines.scripted import ScriptedEngine
from tests.inference.helpers import (
    enqueue,
    queue_drained,
    terminal,
    wait_events,
    wait_heartbeats,
    wait_until,
)


def test_worker_streams_meta_tokens_done_and_every_event_matches_its_schema(
    start_worker,
):
    start_worker(ScriptedEngine(text="one two three"))
    enqueue("job-1")
    events = wait_events("job-1", terminal)
    assert [e.type for e in events] == ["meta", "token", "token", "token", "done"]
    for event in events:
        protocol.event_validate(event.type, event.data)
    assert "".join(e.data["t"] for e in events if e.type == "token") == "one two three"
    done = events[-1].data
    assert done["finish_reason"] == "stop"
    assert done["usage"]["completion_tokens"] == 3
    assert done["usage"]["prompt_tokens"] > 0
    assert done["ttft_ms"] is not None and done["latency_ms"] >= done["ttft_ms"]


def test_meta_is_written_when_the_engine_starts_on_the_prompt_before_any_token(
    start_worker,
):
    # the "started" signal: a worker took the job and its engine reads the prompt
    # (the scripted engine waits first_delay_ms before its first token, as a long
    # prompt does); the page shows "Reading the conversation…" from it
    start_worker(ScriptedEngine(text="one two", first_delay_ms=3000))
    enqueue("job-read")
    events = wait_events("job-read", lambda evs: any(e.type == "meta" for e in evs))
    assert [e.type for e in events] == ["meta"]
    protocol.event_validate(events[0].type, events[0].data)
    ended = wait_events("job-read", terminal)
    assert [e.type for e in ended] == ["meta", "token", "token", "done"]


def test_cancel_flag_stops_generation_within_one_second(start_worker):
    start_worker(ScriptedEngine(text="tok ", cycle=True, delay_ms=10))
    enqueue("job-long", max_tokens=2000)
    wait_events("job-long", lambda ev: sum(e.type == "token" for e in ev) >= 5)
    asked = time.monotonic()
    inference_client.job_cancel(job_id="job-long")
    events = wait_events("job-long", terminal, timeout=5)
    elapsed = time.monotonic() - asked
    done = events[-1]
    assert done.type == "done" and done.data["finish_reason"] == "cancelled"
    assert elapsed < 1.0
    tokens = sum(e.type == "token" for e in events)
    assert 5 <= tokens < 2000
    assert done.data["usage"]["completion_tokens"] == tokens


def test_slot_is_free_for_the_next_job_after_a_cancel(start_worker):
    start_worker(ScriptedEngine(text="tok ", cycle=True, delay_ms=10), concurrency=1)
    enqueue("first", max_tokens=2000)
    enqueue("second", max_tokens=3)
    wait_events("first", lambda ev: len(ev) >= 3)
    assert inference_client.generation_events(job_id="second") == []
    inference_client.job_cancel(job_id="first")
    events = wait_events("second", terminal, timeout=5)
    assert events[-1].data["finish_reason"] == "length"


def test_backlog_stays_in_redis_until_a_slot_is_free(start_worker):
    handle = start_worker(
        ScriptedEngine(text="tok ", cycle=True, delay_ms=10), concurrency=1
    )
    for i in range(3):
        enqueue(f"job-{i}", max_tokens=2000)
    wait_events("job-0", lambda ev: len(ev) >= 2)
    # the worker went on running job-0 (20 more tokens, a heartbeat) without taking
    # another: a take loop that ignored its free slots would have read them at once
    wait_events("job-0", lambda ev: len(ev) >= 22)
    wait_heartbeats(handle.worker.worker_id)
    pending = redis_sync().xpending(keys.queue_key("default"), protocol.GROUP)
    assert pending["pending"] == 1  # only the running job was delivered
    for i in range(3):
        inference_client.job_cancel(job_id=f"job-{i}")


def test_job_past_its_deadline_is_dropped_with_an_error_event(start_worker):
    enqueue("stale", deadline_in=-1)
    start_worker(ScriptedEngine(text="never"))
    events = wait_events("stale", terminal)
    assert [e.type for e in events] == ["error"]
    assert events[0].data["code"] == protocol.ERROR_QUEUE_TIMEOUT


def test_engine_failure_ends_the_generation_with_an_error_event(start_worker):
    engine = ScriptedEngine(text="a b c d")
    start_worker(engine)
    job = enqueue("boom", script={"fail_after": 2})
    events = wait_events("boom", terminal)
    assert events[-1].type == "error"
    assert events[-1].data["code"] == protocol.ERROR_ENGINE
    assert sum(e.type == "token" for e in events) == 2
    # after tokens the error reports what was spent (the gateway bills it)
    assert events[-1].data["usage"] == {
        "prompt_tokens": engine.count_tokens(job.messages),
        "completion_tokens": 2,
        "cached_tokens": 0,
    }


def test_an_engine_failure_before_the_first_token_reports_no_usage(start_worker):
    start_worker(ScriptedEngine(text="a b"))
    enqueue("early", script={"fail_after": 0})
    events = wait_events("early", terminal)
    assert [e.type for e in events] == ["meta", "error"]
    assert events[-1].data["usage"] is None


def test_a_stream_lost_mid_answer_is_written_back_under_its_entry_ids(start_worker):
    """Redis restarted empty (here: the stream deleted) while the worker writes: its
    next write puts back every entry it wrote, with the same ids, so a reader resuming
    after an old id gets exactly the rest and the stream holds the whole answer."""
    words = [f"w{i}" for i in range(40)]
    start_worker(ScriptedEngine(text=" ".join(words), delay_ms=20))
    enqueue("lost-stream")
    before = wait_events(
        "lost-stream", lambda evs: sum(e.type == "token" for e in evs) >= 5
    )
    redis_sync().delete(keys.gen_key("lost-stream"))
    events = wait_events("lost-stream", terminal)
    assert [e.id for e in events[: len(before)]] == [e.id for e in before]
    assert [e.type for e in events].count("meta") == 1
    assert events[-1].type == "done"
    text = "".join(e.data["t"] for e in events if e.type == "token")
    assert text.split() == words
    assert (
        sum(e.type == "token" for e in events)
        == (events[-1].data["usage"]["completion_tokens"])
    )
    last = tuple(int(p) for p in before[-1].id.split("-"))
    resumed = [e for e in events if tuple(int(p) for p in e.id.split("-")) > last]
    resumed_text = "".join(e.data["t"] for e in resumed if e.type == "token")
    seen = "".join(e.data["t"] for e in before if e.type == "token")
    assert seen + resumed_text == text


def test_generation_with_no_client_attached_is_cancelled_after_the_grace_period(
    start_worker,
):
    start_worker(ScriptedEngine(text="tok ", cycle=True, delay_ms=10))
    enqueue("orphan", max_tokens=2000)
    wait_events("orphan", lambda ev: len(ev) >= 2)
    redis_sync().set(keys.detached_key("orphan"), f"{time.time() + 0.2:.3f}")
    events = wait_events("orphan", terminal, timeout=3)
    assert events[-1].data["finish_reason"] == "cancelled"


def test_only_one_terminal_event_even_when_the_web_tier_times_a_job_out(start_worker):
    enqueue("raced", deadline_in=60)
    assert inference_client.generation_fail(
        job_id="raced", code="queue_timeout", message="late"
    )
    handle = start_worker(ScriptedEngine(text="a b"))
    # the worker took the job and acknowledged it, leaving the stream as it was
    wait_until(lambda: handle.worker.jobs_done == 1)
    assert queue_drained()
    events = inference_client.generation_events(job_id="raced")
    raw = redis_sync().xrange(keys.gen_key("raced"))
    assert [e.type for e in events] == ["error"]
    assert len(raw) == 1
    assert not inference_client.generation_fail(
        job_id="raced", code="x", message="again"
    )


def test_worker_heartbeat_makes_the_pool_live_and_leaving_removes_it(start_worker):
    assert liveness.workers_live(pool="default") == 0
    handle = start_worker(ScriptedEngine())
    assert liveness.workers_live(pool="default") == 1
    handle.stop()
    assert liveness.workers_live(pool="default") == 0


def test_started_runs_once_the_engine_is_ready_and_before_the_pool_is_live(
    start_worker,
):
    # the worker command freezes its start-up objects there: after the model's
    # load, before any job can be taken
    class Loading(ScriptedEngine):
        loaded = False

        async def start(self) -> None:
            self.loaded = True

    engine = Loading()
    seen: list[tuple[bool, int]] = []
    start_worker(
        engine,
        started=lambda: seen.append(
            (engine.loaded, liveness.workers_live(pool="default"))
        ),
    )
    assert seen == [(True, 0)]
    assert liveness.workers_live(pool="default") == 1


def blocked_in_xreadgroup() -> bool:
    """True while a Redis client (here: the one worker running) is blocked in
    XREADGROUP. XINFO CONSUMERS cannot tell: a blocked read that got nothing yet
    creates no consumer."""
    return any(
        c.get("cmd") == "xreadgroup" and "b" in c.get("flags", "")
        for c in redis_sync().client_list()
    )


def test_a_job_arriving_while_the_worker_stops_is_put_back_not_taken(start_worker):
    handle = start_worker(ScriptedEngine(text="x"), block_ms=5000)
    # the worker is now blocked reading the queue
    wait_until(blocked_in_xreadgroup)
    handle.loop.call_soon_threadsafe(handle.worker.stop)
    enqueue("late")
    handle.thread.join(timeout=10)
    assert not handle.thread.is_alive()
    assert inference_client.generation_events(job_id="late") == []
    queue = keys.queue_key("default")
    [(_id, fields)] = redis_sync().xrange(queue)
    assert protocol.Job.from_fields(fields).job_id == "late"
    assert redis_sync().xpending(queue, protocol.GROUP)["pending"] == 0


def test_an_engine_error_with_its_own_code_keeps_its_message_for_the_user(
    start_worker, caplog
):
    caplog.set_level(logging.INFO, logger="inference.worker")
    start_worker(ScriptedEngine(text="a b"))
    enqueue("too-long", script={"fail_after": 0, "fail_code": "context_overflow"})
    events = wait_events("too-long", terminal)
    assert events[-1].data["code"] == "context_overflow"
    assert events[-1].data["message"] == "Scripted failure (context_overflow)."
    enqueue("generic", script={"fail_after": 0})
    events = wait_events("generic", terminal)
    assert (
        events[-1].data["message"]
        == "The model failed while answering. Please try again."
    )
    # the expected refusal is told without a traceback; an engine fault keeps its own
    refused = [r for r in caplog.records if "too-long" in r.getMessage()]
    assert refused and all(
        r.levelno == logging.INFO and r.exc_info is None for r in refused
    )
    faults = [r for r in caplog.records if r.getMessage() == "job generic failed"]
    assert faults and faults[0].levelno == logging.ERROR and faults[0].exc_info


def test_a_burst_of_tokens_is_written_in_order_one_event_each_before_done(
    start_worker,
):
    words = [f"w{i} " for i in range(300)]
    start_worker(ScriptedEngine(text="".join(words)))
    enqueue("burst", max_tokens=1000)
    events = wait_events("burst", terminal)
    tokens = [e.data["t"] for e in events if e.type == "token"]
    assert events[-1].type == "done"
    assert [e.type for e in events[:-1]] == ["meta"] + ["token"] * len(tokens)
    assert "".join(tokens) == "".join(words)
    assert events[-1].data["usage"]["completion_tokens"] == len(tokens)


def test_a_queue_deleted_under_the_blocking_read_does_not_end_the_worker(start_worker):
    """The pool's queue stream deleted while the worker blocks on it (Redis answers
    the read "UNBLOCKED the stream key no longer exists"): the worker recreates its
    group and serves the next job, as after Redis came back empty (NOGROUP)."""
    handle = start_worker(ScriptedEngine(text="back again"))
    client = redis_sync()

    def blocked_on_its_queue() -> bool:
        return any(
            "b" in c.get("flags", "") and c.get("cmd") == "xreadgroup"
            for c in client.client_list()
        )

    wait_until(blocked_on_its_queue)
    queue = keys.queue_key("default")
    client.delete(queue, keys.background_queue_key("default"))
    wait_until(lambda: not blocked_on_its_queue() or client.exists(queue))
    enqueue("after-delete")
    events = wait_events("after-delete", terminal, timeout=15)
    assert events[-1].type == "done"
    assert "".join(e.data["t"] for e in events if e.type == "token") == "back again"
    assert handle.thread.is_alive()
