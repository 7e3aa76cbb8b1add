"""A pool's two lanes (inference/intake.py): what a person waits on runs first, and
takes the slot of running background work (titles, summaries, facts)."""

import threading

from inference import client as inference_client
from inference import keys, protocol
from inference.connections import redis_sync
from inference.engines.scripted import ScriptedEngine
from tests.inference.helpers import (
    enqueue,
    terminal,
    wait_events,
    wait_until,
)

LONG = {"text": "tok ", "cycle": True, "delay_ms": 10}


def ms(entry_id: str) -> int:
    return int(entry_id.split("-")[0])


def tokens(events: list[protocol.Event]) -> int:
    return sum(e.type == "token" for e in events)


def test_a_turn_takes_the_slot_of_a_running_background_job(start_worker):
    start_worker(ScriptedEngine(), concurrency=1)
    enqueue("summary", script=LONG, max_tokens=2000, background=True)
    wait_events("summary", lambda ev: tokens(ev) >= 3)
    enqueue("turn", script={"text": "the answer"})
    # without preemption the turn would wait ~20 s for 2,000 tokens of summary
    turn = wait_events("turn", terminal, timeout=5)
    assert turn[-1].type == "done" and turn[-1].data["finish_reason"] == "stop"
    assert "".join(e.data["t"] for e in turn if e.type == "token") == "the answer"
    summary = wait_events("summary", terminal, timeout=5)
    assert summary[-1].type == "error"
    assert summary[-1].data["code"] == protocol.ERROR_PREEMPTED
    protocol.event_validate("error", summary[-1].data)
    assert 3 <= tokens(summary) < 2000  # cut where it was, not run to its end


def test_background_jobs_wait_while_turns_are_queued(start_worker):
    start_worker(ScriptedEngine(), concurrency=1)
    enqueue("turn-1", script=LONG, max_tokens=2000)
    wait_events("turn-1", lambda ev: tokens(ev) >= 2)
    enqueue("title", script={"text": "A short title", "delay_ms": 10}, background=True)
    enqueue("turn-2", script={"text": "the second answer", "delay_ms": 10})
    inference_client.job_cancel(job_id="turn-1")
    turn_2 = wait_events("turn-2", terminal, timeout=5)
    title = wait_events("title", terminal, timeout=5)
    # queued first, but served after the turn that came later (an entry id starts
    # with its epoch ms; each job takes 30 ms or more)
    assert ms(title[0].id) >= ms(turn_2[-1].id)
    assert title[-1].data["finish_reason"] == "stop"


def test_a_running_turn_is_never_preempted(start_worker):
    start_worker(ScriptedEngine(), concurrency=1)
    text = " ".join(["tok"] * 30)
    enqueue("turn-1", script={"text": text, "delay_ms": 10})
    wait_events("turn-1", lambda ev: tokens(ev) >= 2)
    enqueue("turn-2", script={"text": "next"})
    first = wait_events("turn-1", terminal, timeout=5)
    assert first[-1].data["finish_reason"] == "stop"
    assert "".join(e.data["t"] for e in first if e.type == "token") == text
    assert wait_events("turn-2", terminal)[-1].data["finish_reason"] == "stop"


def test_a_preempted_background_generation_is_sent_again_and_completes(
    start_worker,
):
    handle = start_worker(ScriptedEngine(), concurrency=1)
    text = " ".join(f"w{i}" for i in range(30))
    results = []
    caller = threading.Thread(
        target=lambda: results.append(
            inference_client.generation_run(
                pool="default",
                messages=[{"role": "user", "content": "summarise"}],
                params={"script": {"text": text, "delay_ms": 10}, "max_tokens": 100},
                timeout_s=20,
                background=True,
            )
        )
    )
    caller.start()
    wait_until(lambda: handle.worker._background)  # the first attempt runs
    enqueue("turn", script={"text": "now"})
    assert wait_events("turn", terminal, timeout=5)[-1].type == "done"
    caller.join(timeout=20)
    [result] = results
    assert result.complete
    assert result.text == text  # the second attempt's text alone, from the start
    # the preempted attempt, the turn and the attempt sent again
    # (counted after the ack, which follows the terminal event by a moment)
    wait_until(lambda: handle.worker.jobs_done == 3)
    assert redis_sync().xlen(keys.background_queue_key("default")) == 0


def test_background_work_waiting_when_a_worker_stops_is_served_by_the_next(
    start_worker,
):
    handle = start_worker(ScriptedEngine(), concurrency=1)
    enqueue("turn", script=LONG, max_tokens=2000)
    wait_events("turn", lambda ev: tokens(ev) >= 2)
    enqueue("facts", script={"text": "- likes tea"}, background=True)
    handle.stop()  # cancels the running turn
    assert wait_events("turn", terminal)[-1].data["finish_reason"] == "cancelled"
    assert inference_client.generation_events(job_id="facts") == []
    lane = keys.background_queue_key("default")
    assert redis_sync().xlen(lane) == 1  # still waiting, for the next worker
    replacement = start_worker(ScriptedEngine(), concurrency=1)
    facts = wait_events("facts", terminal, timeout=5)
    assert facts[0].data["worker"] == replacement.worker.worker_id
    assert facts[-1].data["finish_reason"] == "stop"
