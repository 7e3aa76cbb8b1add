"""What the rest of the product calls to use the inference tier over Redis.

Enqueue a job, cancel it, read its event stream (sync for finalisation, async for the
SSE relay), attach/detach stream watchers, and check pool liveness. Key names and event
shapes come from :mod:`inference.protocol`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, cast

import redis.asyncio as aioredis

from inference import protocol
from inference.connections import redis_async, redis_sync

# Heartbeats older than this (seconds) mean the worker is gone. Workers beat every 2 s.
WORKER_TTL_S = 10.0

# Append a terminal event unless one exists: KEYS = gen stream, final marker;
# ARGV = event type, payload JSON, TTL (s). Returns the entry id, or false if the
# generation already had its terminal event.
_TERMINAL_LUA = """
if redis.call('SET', KEYS[2], '1', 'NX', 'EX', ARGV[3]) then
  local id = redis.call('XADD', KEYS[1], '*', 'e', ARGV[1], 'd', ARGV[2])
  redis.call('EXPIRE', KEYS[1], ARGV[3])
  return id
end
return false
"""


def job_enqueue(
    *, pool: str, job: protocol.Job, client: Any = None, background: bool = False
) -> Any:
    """Append a job to its pool's queue stream; return the queue entry id.

    ``client``: a pipeline to queue the command on (then the id is the pipeline's
    result); default: the process's sync client, at once. ``background``: the pool's
    background lane (:func:`inference.protocol.background_queue_key`) instead.
    """
    queue = (
        protocol.background_queue_key(pool) if background else protocol.queue_key(pool)
    )
    return (client or redis_sync()).xadd(queue, job.to_fields())


def pool_load(*, pool: str, now: float | None = None) -> tuple[int, int | None]:
    """Return ``(live workers, waiting jobs)`` of ``pool`` in one round trip.

    Live: a heartbeat in the last WORKER_TTL_S s. Waiting: entries of the queue not yet
    delivered to a worker (the consumer group's lag); 0 without a queue; None when
    Redis cannot say (no group yet, or a lag it does not know): count them then.
    """
    now = time.time() if now is None else now
    with redis_sync().pipeline(transaction=False) as pipe:
        pipe.zcount(protocol.workers_key(pool), now - WORKER_TTL_S, "+inf")
        pipe.xinfo_groups(protocol.queue_key(pool))
        live, groups = pipe.execute(raise_on_error=False)
    if isinstance(live, Exception):
        raise live
    if isinstance(groups, Exception):
        if "no such key" not in str(groups).lower():
            raise groups
        return int(live), 0
    group = next((g for g in groups if g.get("name") == protocol.GROUP), None)
    lag = group.get("lag") if group is not None else None
    return int(live), (None if lag is None else int(lag))


def job_cancel(*, job_id: str, ttl_s: int = 3600) -> None:
    """Set the cancel flag of a generation (workers poll it every few ms)."""
    redis_sync().set(protocol.cancel_key(job_id), "1", ex=ttl_s)


def workers_live(*, pool: str, now: float | None = None) -> int:
    """Return how many workers of ``pool`` sent a heartbeat in the last WORKER_TTL_S s."""
    now = time.time() if now is None else now
    return redis_sync().zcount(protocol.workers_key(pool), now - WORKER_TTL_S, "+inf")


def terminal_append(
    client: Any, *, job_id: str, event_type: str, payload: dict[str, Any], ttl_s: int
) -> Any:
    """Append the terminal event of a generation if it has none yet (atomic, Lua).

    Works with a sync or an async client (an async one returns an awaitable). The result
    is the new entry id, or ``None`` when another writer already ended the generation.
    """
    fields = protocol.event_fields(event_type, payload)
    return client.eval(
        _TERMINAL_LUA,
        2,
        protocol.gen_key(job_id),
        protocol.final_key(job_id),
        fields["e"],
        fields["d"],
        ttl_s,
    )


def generation_fail(*, job_id: str, code: str, message: str, ttl_s: int = 3600) -> bool:
    """End a generation with an ``error`` event and set its cancel flag.

    Used when the web tier gives up on a job (queue timeout, no worker). Returns False if
    the generation had already ended.
    """
    client = redis_sync()
    written = terminal_append(
        client,
        job_id=job_id,
        event_type=protocol.EVENT_ERROR,
        payload={"code": code, "message": message, "usage": None},
        ttl_s=ttl_s,
    )
    job_cancel(job_id=job_id, ttl_s=ttl_s)
    return bool(written)


def generation_events(*, job_id: str) -> list[protocol.Event]:
    """Return a generation's events up to and including its first terminal event."""
    events: list[protocol.Event] = []
    entries = redis_sync().xrange(protocol.gen_key(job_id))
    for entry_id, fields in cast(list[protocol.StreamEntry], entries):
        event = protocol.event_parse(entry_id, fields)
        events.append(event)
        if event.is_terminal:
            break
    return events


def generation_exists(*, job_id: str) -> bool:
    """True while the generation's event stream exists in Redis."""
    return bool(redis_sync().exists(protocol.gen_key(job_id)))


async def agen_read(
    *, job_id: str, after: str, block_ms: int, count: int = 1024
) -> list[protocol.Event]:
    """Block up to ``block_ms`` for events after entry id ``after``; return them in order."""
    client: aioredis.Redis = redis_async()
    result = cast(
        protocol.StreamRead,
        await client.xread(
            {protocol.gen_key(job_id): after}, count=count, block=block_ms
        ),
    )
    if not result:
        return []
    _key, entries = result[0]
    return [protocol.event_parse(entry_id, fields) for entry_id, fields in entries]


# How many waiting entries a queue-position scan reads at most: admission control
# keeps a pool's queue short, so a longer queue is reported as "more than this"
# (inference.waiting.aqueue_position).
QUEUE_POSITION_SCAN_MAX = 500


async def astream_attach(*, job_id: str, ttl_s: int = 3600) -> None:
    """Register an SSE client on a generation and clear any pending detach cancel."""
    client = redis_async()
    async with client.pipeline(transaction=True) as pipe:
        pipe.incr(protocol.watch_key(job_id))
        pipe.expire(protocol.watch_key(job_id), ttl_s)
        pipe.delete(protocol.detached_key(job_id))
        await pipe.execute()


_DETACH_LUA = """
local n = redis.call('DECR', KEYS[1])
if n <= 0 then
  redis.call('DEL', KEYS[1])
  redis.call('SET', KEYS[2], ARGV[1], 'EX', ARGV[2])
end
return n
"""


async def astream_detach(*, job_id: str, grace_s: float) -> int:
    """Unregister an SSE client; with none left, schedule a cancel ``grace_s`` seconds on.

    Returns the number of clients still attached. A client that re-attaches within the
    grace period clears the scheduled cancel (:func:`astream_attach`).
    """
    deadline = time.time() + grace_s
    return int(
        await redis_async().eval(
            _DETACH_LUA,
            2,
            protocol.watch_key(job_id),
            protocol.detached_key(job_id),
            f"{deadline:.3f}",
            int(grace_s) + 3600,
        )
    )


QUEUE_TIMEOUT_MESSAGE = (
    "The model is busy: no worker could take this request in time. "
    "Please try again in a moment."
)
NO_WORKER_MESSAGE = (
    "The model is not available right now (no inference worker is running). "
    "Please try again later."
)


def generation_watchdog(
    *,
    job_id: str,
    pool: str,
    enqueued_at: float,
    queue_timeout_s: float,
    no_worker_grace_s: float,
    started: bool,
    last_event_at: float,
    now: float | None = None,
) -> str | None:
    """End a generation that can no longer finish; return the error code written, or None.

    Rules: a job not started by a worker within ``queue_timeout_s`` of ``enqueued_at`` is a
    queue timeout; a job (started or not) whose pool has had no live worker for
    ``no_worker_grace_s`` since the last event (or enqueue) is a lost worker.
    """
    now = time.time() if now is None else now
    if not started and now - enqueued_at > queue_timeout_s:
        code, message = protocol.ERROR_QUEUE_TIMEOUT, QUEUE_TIMEOUT_MESSAGE
    elif (
        now - last_event_at > no_worker_grace_s
        and workers_live(pool=pool, now=now) == 0
    ):
        code, message = protocol.ERROR_NO_WORKER, NO_WORKER_MESSAGE
    else:
        return None
    return code if generation_fail(job_id=job_id, code=code, message=message) else None


@dataclass
class GenerationResult:
    """The outcome of a non-streaming generation (:func:`generation_run`).

    ``complete`` is True only for a ``done`` event with finish reason ``stop``: the
    model ended its answer itself (not cut by max_tokens, cancel, error or timeout).
    """

    job_id: str
    text: str
    finish_reason: str
    error_code: str = ""
    usage: protocol.Usage | None = None

    @property
    def complete(self) -> bool:
        """True when the model finished the answer on its own."""
        return self.finish_reason == protocol.FINISH_STOP and not self.error_code


def generation_run(
    *,
    pool: str,
    messages: list[dict[str, str]],
    params: dict[str, Any],
    timeout_s: float,
    user_ref: str = "",
    stream_ttl_s: int = 600,
    background: bool = False,
) -> GenerationResult:
    """Enqueue a job and wait (blocking, sync) for its terminal event; return the text.

    For background work (summaries, titles, fact extraction) run from Celery or
    commands, never from the event loop. ``params`` are the job's sampling parameters
    (``max_tokens`` in tokens). After ``timeout_s`` seconds without a terminal event the
    generation is ended with a ``queue_timeout`` error (and cancelled) and the result
    carries ``error_code``; the partial text is returned but is not ``complete``.

    ``background``: the job goes to the pool's background lane, behind every job a
    person waits on; a worker may stop it for one (``error preempted``), and it is
    then sent again as a new job, from the start, until ``timeout_s`` runs out.
    """
    deadline = time.time() + timeout_s
    while True:
        result = _generation_attempt(
            pool=pool,
            messages=messages,
            params=params,
            deadline=deadline,
            user_ref=user_ref,
            stream_ttl_s=stream_ttl_s,
            background=background,
        )
        if result.error_code != protocol.ERROR_PREEMPTED or time.time() >= deadline:
            return result


def _generation_attempt(
    *,
    pool: str,
    messages: list[dict[str, str]],
    params: dict[str, Any],
    deadline: float,
    user_ref: str,
    stream_ttl_s: int,
    background: bool,
) -> GenerationResult:
    """Run one job of :func:`generation_run` until its terminal event or ``deadline``
    (epoch s)."""
    job_id = protocol.new_job_id()
    job = protocol.Job(
        job_id=job_id,
        messages=messages,
        params=params,
        user_ref=user_ref,
        enqueued_at=time.time(),
        deadline=deadline,
    )
    job_enqueue(pool=pool, job=job, background=background)
    client = redis_sync()
    key = protocol.gen_key(job_id)
    last = protocol.STREAM_START
    parts: list[str] = []
    while True:
        block_ms = max(1, int(min(1.0, deadline - time.time()) * 1000))
        result = cast(
            protocol.StreamRead,
            client.xread({key: last}, count=1024, block=block_ms),
        )
        for _key, entries in result or []:
            for entry_id, fields in entries:
                last = entry_id
                event = protocol.event_parse(entry_id, fields)
                if event.type == protocol.EVENT_TOKEN:
                    parts.append(event.data["t"])
                elif event.type == protocol.EVENT_DONE:
                    return GenerationResult(
                        job_id=job_id,
                        text="".join(parts),
                        finish_reason=event.data["finish_reason"],
                        usage=protocol.Usage.from_dict(event.data.get("usage")),
                    )
                elif event.type == protocol.EVENT_ERROR:
                    return GenerationResult(
                        job_id=job_id,
                        text="".join(parts),
                        finish_reason="error",
                        error_code=event.data.get("code", protocol.ERROR_ENGINE),
                    )
        if time.time() >= deadline:
            generation_fail(
                job_id=job_id,
                code=protocol.ERROR_QUEUE_TIMEOUT,
                message="The background generation timed out.",
                ttl_s=stream_ttl_s,
            )
            return GenerationResult(
                job_id=job_id,
                text="".join(parts),
                finish_reason="error",
                error_code=protocol.ERROR_QUEUE_TIMEOUT,
            )
