"""The job builder and the reader of a generation's end (inference/jobs.py), which
the gateway's generations and the background ones share."""

from __future__ import annotations

import threading
import time

import pytest

from inference import client as inference_client
from inference import jobs, keys, protocol
from inference.connections import redis_sync

USAGE = {"prompt_tokens": 11, "completion_tokens": 3, "cached_tokens": 0}
SPENT = {"prompt_tokens": 11, "completion_tokens": 2, "cached_tokens": 0}


def _event(n: int, event_type: str, data: dict) -> protocol.Event:
    return protocol.Event(id=f"1-{n}", type=event_type, data=data)


def _stream(tokens: list[str], terminal: tuple[str, dict] | None) -> list:
    events = [_event(0, "meta", {"model": "m1", "worker": "w1", "queue_ms": 1})]
    events += [_event(i + 1, "token", {"t": t}) for i, t in enumerate(tokens)]
    if terminal is not None:
        events.append(_event(len(events), *terminal))
    return events


def _done(finish: str) -> tuple[str, dict]:
    return "done", {
        "finish_reason": finish,
        "usage": USAGE,
        "ttft_ms": 5,
        "latency_ms": 9,
    }


def test_a_job_expires_its_timeout_after_its_enqueue():
    job = jobs.job_build(
        messages=[{"role": "user", "content": "hi"}],
        params={"max_tokens": 8},
        timeout_s=30,
        user_ref="7",
        job_id="j1",
        enqueued_at=1000.0,
    )
    assert (job.job_id, job.user_ref, job.params) == ("j1", "7", {"max_tokens": 8})
    assert (job.enqueued_at, job.deadline) == (1000.0, 1030.0)
    assert job.kind == protocol.KIND_GENERATE and job.priority == 0
    fresh = jobs.job_build(messages=[], params={}, timeout_s=1)
    assert fresh.job_id and fresh.job_id != job.job_id
    assert abs(fresh.enqueued_at - time.time()) < 5


def test_the_finish_map_covers_every_way_a_generation_ends():
    assert set(jobs.FINISH_MAP) == protocol.FINISH_REASONS | {jobs.FINISH_ERROR}


@pytest.mark.parametrize(
    ("finish", "status", "openai"),
    [
        ("stop", "complete", "stop"),
        ("length", "complete", "length"),
        ("cancelled", "cancelled", "stop"),
        ("content_filter", "filtered", "content_filter"),
    ],
)
def test_a_done_event_maps_to_its_status_and_openai_finish(finish, status, openai):
    end = jobs.events_fold(_stream(["Hel", "lo"], _done(finish)))
    assert end.ended and end.finish_reason == finish and end.status == status
    assert jobs.FINISH_MAP[finish] == (status, openai)
    assert (end.text, end.tokens, end.meta["model"]) == ("Hello", 2, "m1")
    assert end.usage == protocol.Usage.from_dict(USAGE)
    assert (end.ttft_ms, end.latency_ms, end.error_code) == (5, 9, "")
    assert end.complete == (finish == "stop")


def test_an_error_after_tokens_spends_its_prompt_and_one_token_per_token_event():
    end = jobs.events_fold(
        _stream(
            ["Hel", "lo"],
            ("error", {"code": "worker_lost", "message": "x", "usage": SPENT}),
        )
    )
    assert (end.status, end.finish_reason) == ("error", jobs.FINISH_ERROR)
    assert (end.error_code, end.error_message) == ("worker_lost", "x")
    assert end.usage == protocol.Usage(prompt_tokens=11, completion_tokens=2)
    assert not end.complete and end.ttft_ms is None


def test_an_error_before_any_token_spends_nothing_and_defaults_its_code():
    end = jobs.events_fold(
        _stream([], ("error", {"code": "", "message": "", "usage": SPENT}))
    )
    assert end.error_code == protocol.ERROR_ENGINE
    assert end.usage == protocol.Usage()


def test_a_fold_stops_at_the_first_terminal_event():
    events = _stream(["a"], _done("stop")) + [_event(9, "token", {"t": "late"})]
    assert jobs.events_fold(events).text == "a"
    running = jobs.events_fold(_stream(["a", "b"], None))
    assert not running.ended and running.text == "ab" and not running.complete


def _serve(pool: str, tokens: list[str], terminal: tuple[str, dict]) -> None:
    """Take the one job of ``pool``'s queue and write its events, as a worker does."""
    client = redis_sync()
    deadline = time.time() + 10
    while not (entries := client.xrange(keys.queue_key(pool))):
        assert time.time() < deadline, "no job was enqueued"
        time.sleep(0.01)
    job = protocol.Job.from_fields(entries[0][1])
    key = keys.gen_key(job.job_id)
    client.xadd(
        key,
        protocol.event_fields("meta", {"model": "m1", "worker": "w1", "queue_ms": 1}),
    )
    for text in tokens:
        client.xadd(key, protocol.token_fields(text))
    inference_client.terminal_append(
        client, job_id=job.job_id, event_type=terminal[0], payload=terminal[1], ttl_s=60
    )


@pytest.mark.parametrize(
    "terminal",
    [
        _done("stop"),
        _done("length"),
        ("error", {"code": "engine_error", "message": "x", "usage": SPENT}),
    ],
    ids=["stop", "length", "error"],
)
def test_a_background_generation_ends_as_the_fold_of_its_stream_says(terminal):
    server = threading.Thread(target=_serve, args=("fold", ["Hel", "lo"], terminal))
    server.start()
    end = inference_client.generation_run(
        pool="fold",
        messages=[{"role": "user", "content": "hi"}],
        params={},
        timeout_s=10,
    )
    server.join()
    events = inference_client.generation_events(job_id=end.job_id)
    expected = jobs.events_fold(events)
    expected.job_id = end.job_id
    assert end == expected and end.text == "Hello"


def test_a_background_generation_past_its_timeout_ends_with_queue_timeout():
    started = time.monotonic()
    end = inference_client.generation_run(
        pool="nobody",
        messages=[{"role": "user", "content": "hi"}],
        params={},
        timeout_s=0.3,
    )
    assert time.monotonic() - started < 3
    assert (end.finish_reason, end.error_code) == (
        "error",
        protocol.ERROR_QUEUE_TIMEOUT,
    )
    assert end.status == "error" and not end.complete
    # the stream holds the same end, so a late worker does not run the job
    [event] = inference_client.generation_events(job_id=end.job_id)
    assert event.data["code"] == protocol.ERROR_QUEUE_TIMEOUT
    assert redis_sync().exists(keys.cancel_key(end.job_id))
