"""A live worker's own pending entries (inference/intake.py ``_resume_pending``).

An entry Redis delivered to a worker that never saw it (its read failed after the
server answered: a client timeout, the process paused) must still run: crash recovery
only looks at dead workers' entries.
"""

import time
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import TimeoutError as RedisTimeoutError

from inference import keys, protocol
from inference.connections import redis_sync
from inference.engines.scripted import ScriptedEngine
from tests.inference.helpers import enqueue, queue_drained, terminal, wait_events


def _deliver_all(consumer: str, queues: list[str]) -> int:
    """Deliver every waiting entry of ``queues`` to ``consumer`` (it never runs
    them); return how many."""
    r = redis_sync()
    for queue in queues:
        try:
            r.xgroup_create(queue, protocol.GROUP, id="0", mkstream=True)
        except Exception:  # noqa: BLE001 - group exists
            pass
    reply = r.xreadgroup(protocol.GROUP, consumer, dict.fromkeys(queues, ">"))
    return sum(len(entries) for _key, entries in reply)


def test_entries_delivered_before_start_run_on_every_lane_within_the_slot_count(
    start_worker,
):
    pool = "default"
    worker_id = "w-pending"
    own = keys.worker_queue_key(pool, worker_id)
    enqueue("pend-interactive", script={"text": "a b"})
    enqueue("pend-background", script={"text": "c d"}, background=True)
    now = time.time()
    affine = protocol.Job(
        job_id="pend-own",
        messages=[{"role": "user", "content": "hello"}],
        params={"max_tokens": 64, "script": {"text": "e f"}},
        enqueued_at=now,
        deadline=now + 60,
    )
    r = redis_sync()
    r.xadd(own, affine.to_fields())
    queues = [own, keys.queue_key(pool), keys.background_queue_key(pool)]
    assert _deliver_all(worker_id, queues) == 3

    start_worker(ScriptedEngine(), worker_id=worker_id, concurrency=1)
    texts = {"pend-interactive": "a b", "pend-background": "c d", "pend-own": "e f"}
    for job_id, text in texts.items():
        events = wait_events(job_id, terminal, timeout=15)
        assert events[-1].type == "done", [e.type for e in events]
        assert "".join(e.data["t"] for e in events if e.type == "token") == text
    assert queue_drained(pool)
    for queue in queues:
        assert r.xpending(queue, protocol.GROUP)["pending"] == 0


def test_a_read_that_times_out_after_redis_delivered_loses_no_job(
    start_worker, monkeypatch
):
    # The outside fault: the client's read times out after the server delivered
    # (socket timeout under load, SIGSTOP). One such read; the rest are real.
    real = aioredis.Redis.xreadgroup
    faults: list[Any] = []

    async def xreadgroup(self: Any, *args: Any, **kwargs: Any) -> Any:
        reply = await real(self, *args, **kwargs)
        if reply and not faults and ">" in args[2].values():
            faults.append(reply)
            raise RedisTimeoutError("Timeout reading from socket")
        return reply

    monkeypatch.setattr(aioredis.Redis, "xreadgroup", xreadgroup)
    handle = start_worker(ScriptedEngine(), concurrency=2)
    enqueue("timed-out", script={"text": "still answered"})
    events = wait_events("timed-out", terminal, timeout=15)
    assert faults, "the fault never fired"
    assert [e.type for e in events] == ["meta", "token", "token", "done"]
    assert events[0].data["worker"] == handle.worker.worker_id
    assert queue_drained()


def test_a_running_job_is_not_started_twice_by_the_pending_check(start_worker):
    handle = start_worker(
        ScriptedEngine(text="tok ", cycle=True, delay_ms=20), concurrency=2
    )
    enqueue("long", max_tokens=60)
    wait_events("long", lambda ev: any(e.type == "token" for e in ev))
    # a pending check while the job runs (as after a failed read): it is skipped
    handle.loop.call_soon_threadsafe(setattr, handle.worker, "_pending_check", True)
    enqueue("next", script={"text": "x"})
    wait_events("next", terminal, timeout=15)
    events = wait_events("long", terminal, timeout=15)
    assert [e.type for e in events].count("meta") == 1
    assert events[-1].type == "done"
    assert queue_drained()
