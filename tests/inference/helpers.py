"""Helpers for inference-tier tests."""

import asyncio
import time

from inference import client as inference_client
from inference import keys, protocol
from inference.connections import redis_sync


def enqueue(
    job_id: str,
    *,
    pool: str = "default",
    script: dict | None = None,
    max_tokens: int = 512,
    deadline_in: float = 60.0,
    messages: list | None = None,
    background: bool = False,
) -> protocol.Job:
    """Put a job on a pool's queue the way the gateway does (``background``: on its
    background lane, the way memory's jobs go)."""
    now = time.time()
    job = protocol.Job(
        job_id=job_id,
        messages=messages or [{"role": "user", "content": "hello"}],
        params={"max_tokens": max_tokens, **({"script": script} if script else {})},
        enqueued_at=now,
        deadline=now + deadline_in,
    )
    inference_client.job_enqueue(pool=pool, job=job, background=background)
    return job


def wait_until(predicate, timeout_s: float = 10.0, interval_s: float = 0.01):
    """Poll ``predicate()`` until it returns a truthy value, and return that value.

    Fails (AssertionError) after ``timeout_s`` seconds; polls every ``interval_s`` s.
    """
    deadline = time.time() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.time() > deadline:
            raise AssertionError(
                f"timed out after {timeout_s} s waiting for {predicate}"
            )
        time.sleep(interval_s)


def worker_state(worker_id: str) -> dict[str, str]:
    """Return the hash a worker writes at each heartbeat (``inf:worker:{worker_id}``)."""
    return redis_sync().hgetall(keys.worker_key(worker_id))


def heartbeat_at(worker_id: str) -> float:
    """Return the epoch second of a worker's last heartbeat (0.0 before its first)."""
    return float(worker_state(worker_id).get("heartbeat", 0.0))


def wait_heartbeats(worker_id: str, n: int = 1, timeout_s: float = 10.0) -> float:
    """Wait until the worker wrote ``n`` heartbeats after this call; return the last's
    time. The worker's state as of the second one reflects everything it did (in its
    event loop) before the first one began."""
    seen = heartbeat_at(worker_id)
    for _ in range(n):
        seen = wait_until(lambda after=seen: _beat_after(worker_id, after), timeout_s)
    return seen


def _beat_after(worker_id: str, after: float) -> float:
    beat = heartbeat_at(worker_id)
    return beat if beat > after else 0.0


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
    queue = keys.queue_key(pool)
    deadline = time.time() + timeout
    while r.xlen(queue) or r.xpending(queue, protocol.GROUP)["pending"]:
        if time.time() > deadline:
            return False
        time.sleep(0.02)
    return True


async def request_read(reader: asyncio.StreamReader) -> bytes:
    """Read one request's head and body (by its content-length); return the body.
    Raises asyncio.IncompleteReadError when the client closes first."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        int(line.split(b":")[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    return await reader.readexactly(length)
