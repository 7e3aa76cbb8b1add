"""Helpers for inference-tier tests."""

import time

from inference import client as inference_client
from inference import protocol
from inference.connections import redis_sync


def enqueue(
    job_id: str,
    *,
    pool: str = "default",
    script: dict | None = None,
    max_tokens: int = 512,
    deadline_in: float = 60.0,
    messages: list | None = None,
) -> protocol.Job:
    """Put a job on a pool's queue the way the gateway does."""
    now = time.time()
    job = protocol.Job(
        job_id=job_id,
        messages=messages or [{"role": "user", "content": "hello"}],
        params={"max_tokens": max_tokens, **({"script": script} if script else {})},
        enqueued_at=now,
        deadline=now + deadline_in,
    )
    inference_client.job_enqueue(pool=pool, job=job)
    return job


def wait_events(job_id: str, predicate, timeout: float = 10.0) -> list[protocol.Event]:
    """Poll a generation's events until ``predicate(events)``; fail after ``timeout`` s."""
    deadline = time.time() + timeout
    while True:
        events = inference_client.generation_events(job_id=job_id)
        if predicate(events):
            return events
        if time.time() > deadline:
            raise AssertionError(
                f"timed out; events so far: {[e.type for e in events]}"
            )
        time.sleep(0.01)


def terminal(events: list[protocol.Event]) -> bool:
    """True once the last event is terminal."""
    return bool(events) and events[-1].is_terminal


def queue_drained(pool: str = "default", timeout: float = 10.0) -> bool:
    """Wait until a pool's queue has no entry left, waiting or pending (acks follow the
    terminal event by a moment); return False after ``timeout`` s."""
    r = redis_sync()
    queue = protocol.queue_key(pool)
    deadline = time.time() + timeout
    while r.xlen(queue) or r.xpending(queue, protocol.GROUP)["pending"]:
        if time.time() > deadline:
            return False
        time.sleep(0.02)
    return True
