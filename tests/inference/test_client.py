"""The watchdog (inference/watchdog.py): one rule, the same result sync and async;
liveness (inference/liveness.py) and a stream's reads (inference/client.py)."""

from __future__ import annotations

import time

import pytest
from asgiref.sync import sync_to_async

from inference import client as inference_client
from inference import keys, liveness, protocol, waiting, watchdog
from inference.connections import redis_sync

USAGE = {"prompt_tokens": 1, "completion_tokens": 1, "cached_tokens": 0}
META = {"model": "m", "worker": "w1", "queue_ms": 1}
DONE = {"finish_reason": "stop", "usage": USAGE, "ttft_ms": 1, "latency_ms": 2}
WATCH = watchdog.Watch(
    job_id="j1", pool="p1", enqueued_at=100.0, queue_timeout_s=30, no_worker_grace_s=5
)


def test_a_job_not_started_in_time_is_a_queue_timeout():
    assert WATCH.due(now=131, started=False, last_event_at=100) == "queue_timeout"
    assert WATCH.due(now=129, started=False, last_event_at=128) is None
    # a started job never times out in the queue
    assert WATCH.due(now=131, started=True, last_event_at=130) is None


def test_a_stream_quiet_past_the_grace_asks_whether_the_pool_lives():
    assert WATCH.due(now=106, started=True, last_event_at=100) == "worker_unavailable"
    assert WATCH.due(now=104, started=True, last_event_at=100) is None


def _watch(job_id: str, *, enqueued_at: float) -> watchdog.Watch:
    return watchdog.Watch(
        job_id=job_id,
        pool="pool",
        enqueued_at=enqueued_at,
        queue_timeout_s=30,
        no_worker_grace_s=1,
    )


@pytest.mark.parametrize("live", [False, True], ids=["no-worker", "worker"])
async def test_the_sync_and_async_watchdogs_end_the_same_generations(live):
    if live:
        redis_sync().zadd(keys.workers_key("pool"), {"w1": time.time()})
    quiet = time.time() - 10  # nothing arrived for 10 s: past the 1 s grace
    results = [
        await sync_to_async(watchdog.generation_watchdog)(
            _watch("sync", enqueued_at=quiet), started=True, last_event_at=quiet
        ),
        await waiting.agen_watchdog(
            _watch("async", enqueued_at=quiet), started=True, last_event_at=quiet
        ),
    ]
    expected = None if live else protocol.ERROR_NO_WORKER
    assert results == [expected, expected]
    for job_id in ("sync", "async"):
        events = inference_client.generation_events(job_id=job_id)
        assert [e.data["code"] for e in events] == ([] if live else [expected])
        assert bool(redis_sync().exists(keys.cancel_key(job_id))) == (not live)


async def test_a_generation_that_already_ended_is_left_as_it_is():
    old = time.time() - 60  # queued 60 s ago, past the 30 s queue timeout
    for job_id in ("sync", "async"):
        inference_client.terminal_append(
            redis_sync(),
            job_id=job_id,
            event_type=protocol.EVENT_DONE,
            payload=DONE,
            ttl_s=60,
        )
    assert (
        await sync_to_async(watchdog.generation_watchdog)(
            _watch("sync", enqueued_at=old), started=False, last_event_at=old
        )
        is None
    )
    assert (
        await waiting.agen_watchdog(
            _watch("async", enqueued_at=old), started=False, last_event_at=old
        )
        is None
    )
    for job_id in ("sync", "async"):
        [event] = inference_client.generation_events(job_id=job_id)
        assert event.type == protocol.EVENT_DONE


async def test_sync_and_async_liveness_count_recent_heartbeats_only():
    now = time.time()
    redis_sync().zadd(keys.workers_key("p"), {"fresh": now, "gone": now - 60})
    assert await sync_to_async(liveness.workers_live)(pool="p") == 1
    assert await waiting.aworkers_live(pool="p", max_age_s=0) == 1


@pytest.mark.parametrize("odd_entry", [False, True], ids=["ours", "odd entry"])
def test_a_streams_events_read_one_by_one_or_many_at_once_are_the_same(odd_entry):
    """generation_events(_many): every event up to the first terminal one, with its
    payload as written (quotes, brackets, non-ASCII), whatever an entry's shape."""
    client = redis_sync()
    texts = ['He said "hi"', "], [", "é 你好", "\\n"]
    for job_id in ("ev-1", "ev-2"):
        key = keys.gen_key(job_id)
        client.xadd(key, protocol.event_fields(protocol.EVENT_META, META))
        for text in texts:
            client.xadd(key, protocol.token_fields(text))
        if odd_entry:
            client.xadd(key, {"e": protocol.EVENT_TOKEN, "d": '{"t": "!"}', "x": "1"})
        client.xadd(key, protocol.event_fields(protocol.EVENT_DONE, DONE))
        client.xadd(key, protocol.token_fields("after the end"))

    one = inference_client.generation_events(job_id="ev-1")
    many = inference_client.generation_events_many(job_ids=["ev-1", "ev-2"])

    extra = ["!"] if odd_entry else []
    assert [e.data.get("t") for e in one if e.type == protocol.EVENT_TOKEN] == [
        *texts,
        *extra,
    ]
    assert [e.type for e in one][-1] == protocol.EVENT_DONE
    assert one[-1].data == DONE and one[0].data == META
    assert [[(e.type, e.data) for e in events] for events in many] == [
        [(e.type, e.data) for e in one]
    ] * 2
    assert all(isinstance(e.id, str) for e in one)
