"""What the rest of the product calls to use the inference tier over Redis: every
command the web tier sends about a job, and the scripts that must agree with the
worker's.

Enqueue a job, cancel or stop it, end it (its terminal event), read its event stream
(sync for finalisation, async for the SSE relay), attach/detach stream watchers and
run a background generation to its end (:func:`generation_run`). Whether a pool has
live workers is :mod:`inference.liveness`; ending a generation that can no longer
finish, :mod:`inference.watchdog`. Helpers named ``*_on`` take a sync or an async
client, so the sync and async callers send the same commands. Key names and event
shapes come from :mod:`inference.protocol`.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, cast

import redis.asyncio as aioredis

from inference import keys, protocol, redis_types
from inference.connections import redis_async, redis_sync
from inference.events_read import generation_events_many
from inference.jobs import FINISH_ERROR, GenerationEnd, events_fold, job_build
from inference.steps import pipelined

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
    *,
    pool: str,
    job: protocol.Job,
    client: Any = None,
    background: bool = False,
    worker: str | None = None,
    entry: redis_types.RedisFields | None = None,
) -> Any:
    """Append a job to its pool's queue stream; return the queue entry id.

    ``client``: a pipeline to queue the command on (then the id is the pipeline's
    result); default: the process's sync client, at once. ``background``: the pool's
    background lane (:func:`inference.keys.background_queue_key`) instead.
    ``worker``: that worker's own stream instead (conversation affinity,
    :func:`inference.affinity.job_route` chose it). ``entry``: ``job.to_fields()``
    when the caller made it already (the job is serialised once per submission).
    """
    entry = entry or job.to_fields()
    if worker:
        from inference.affinity import worker_enqueue

        return worker_enqueue(
            client or redis_sync(), pool=pool, worker=worker, job=job, entry=entry
        )
    queue = keys.background_queue_key(pool) if background else keys.queue_key(pool)
    return (client or redis_sync()).xadd(queue, entry)


def job_cancel(*, job_id: str, ttl_s: int = 3600) -> None:
    """Set the cancel flag of a generation (workers poll it every few ms)."""
    redis_sync().set(keys.cancel_key(job_id), "1", ex=ttl_s)


# KEYS: cancel flag, stream, final mark; ARGV: the done event's e and d, ttl (s).
# The flag always; the terminal event too while the stream is empty (no worker wrote
# its meta: the job still waits in a queue). A worker that takes the job later finds
# the final mark and skips it (inference/worker.py _START_LUA); one that started
# first wrote meta, so this leaves its answer to it.
_STOP_LUA = """
redis.call('SET', KEYS[1], '1', 'EX', ARGV[3])
if redis.call('EXISTS', KEYS[2]) == 1 then return 0 end
if redis.call('SET', KEYS[3], '1', 'NX', 'EX', ARGV[3]) then
  redis.call('XADD', KEYS[2], '*', 'e', ARGV[1], 'd', ARGV[2])
  redis.call('EXPIRE', KEYS[2], ARGV[3])
  return 1
end
return 0
"""


def job_stop(*, job_id: str, ttl_s: int = 3600) -> bool:
    """Cancel a generation (its flag, as :func:`job_cancel`) and, when no worker has
    started it yet, end it at once with ``done`` ``finish_reason: "cancelled"`` and
    no usage (nothing was computed), so a stop of a queued answer does not wait for
    a free worker. Atomic with a worker's start (one script on the job's slot).
    Returns True when the generation was ended here."""
    fields = protocol.event_fields(
        protocol.EVENT_DONE,
        {
            "finish_reason": protocol.FINISH_CANCELLED,
            "usage": dataclasses.asdict(protocol.Usage()),
            "ttft_ms": None,
            "latency_ms": 0,
        },
    )
    ended = keys.eval_on(
        redis_sync(),
        _STOP_LUA,
        3,
        keys.cancel_key(job_id),
        keys.gen_key(job_id),
        keys.final_key(job_id),
        fields["e"],
        fields["d"],
        ttl_s,
    )
    return bool(ended)


def terminal_append(
    client: Any, *, job_id: str, event_type: str, payload: dict[str, Any], ttl_s: int
) -> Any:
    """Append the terminal event of a generation if it has none yet (atomic, Lua).

    Works with a sync or an async client (an async one returns an awaitable). The result
    is the new entry id, or ``None`` when another writer already ended the generation.
    """
    fields = protocol.event_fields(event_type, payload)
    return keys.eval_on(
        client,
        _TERMINAL_LUA,
        2,
        keys.gen_key(job_id),
        keys.final_key(job_id),
        fields["e"],
        fields["d"],
        ttl_s,
    )


def generation_fail_on(
    client: Any, *, job_id: str, code: str, message: str, ttl_s: int = 3600
) -> Any:
    """Send, in one round trip on ``client``, what ends a generation the web tier gives
    up on: an ``error`` event (unless it already ended) and its cancel flag.

    ``client``: a sync client (returns the replies) or an async one (returns an
    awaitable of them); the first reply is falsy when the generation had already
    ended. ``ttl_s``: seconds the stream and the flag are kept.
    """

    def fill(pipe: Any) -> None:
        terminal_append(
            pipe,
            job_id=job_id,
            event_type=protocol.EVENT_ERROR,
            payload={"code": code, "message": message, "usage": None},
            ttl_s=ttl_s,
        )
        pipe.set(keys.cancel_key(job_id), "1", ex=ttl_s)

    return pipelined(client, fill)


def generation_fail(*, job_id: str, code: str, message: str, ttl_s: int = 3600) -> bool:
    """End a generation with an ``error`` event and set its cancel flag (sync,
    :func:`generation_fail_on`); False if the generation had already ended."""
    written, _cancelled = generation_fail_on(
        redis_sync(), job_id=job_id, code=code, message=message, ttl_s=ttl_s
    )
    return bool(written)


def generation_events(*, job_id: str) -> list[protocol.Event]:
    """Return a generation's events up to and including its first terminal event."""
    return generation_events_many(job_ids=[job_id])[0]


def generation_exists(*, job_id: str) -> bool:
    """True while the generation's event stream exists in Redis."""
    return bool(redis_sync().exists(keys.gen_key(job_id)))


async def agen_read(
    *, job_id: str, after: str, block_ms: int, count: int = 1024
) -> list[protocol.Event]:
    """Block up to ``block_ms`` for events after entry id ``after``; return them in order."""
    client: aioredis.Redis = redis_async()
    result = cast(
        redis_types.StreamRead,
        await client.xread({keys.gen_key(job_id): after}, count=count, block=block_ms),
    )
    if not result:
        return []
    _key, entries = result[0]
    return [protocol.event_parse(entry_id, fields) for entry_id, fields in entries]


_ATTACH_LUA = """
redis.call('INCR', KEYS[1])
redis.call('EXPIRE', KEYS[1], ARGV[1])
redis.call('DEL', KEYS[2])
return 1
"""


async def astream_attach(*, job_id: str, ttl_s: int = 3600) -> None:
    """Register an SSE client on a generation and clear any pending detach cancel:
    one command (a script, atomic as a MULTI of the three would be, for a fifth of
    the client's work: a stream's start pays it)."""
    await redis_async().eval(
        _ATTACH_LUA, 2, keys.watch_key(job_id), keys.detached_key(job_id), ttl_s
    )


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
            keys.watch_key(job_id),
            keys.detached_key(job_id),
            f"{deadline:.3f}",
            int(grace_s) + 3600,
        )
    )


def generation_run(
    *,
    pool: str,
    messages: list[dict[str, str]],
    params: dict[str, Any],
    timeout_s: float,
    user_ref: str = "",
    stream_ttl_s: int = 600,
    background: bool = False,
) -> GenerationEnd:
    """Enqueue a job and wait (blocking, sync) for its terminal event; return its end.

    For background work (summaries, titles, fact extraction, the guard) run from
    Celery, commands or request threads, never from the event loop. The job is built
    by :func:`inference.jobs.job_build` and its events read by
    :func:`inference.jobs.events_fold`, as the gateway's generations are. ``params``
    are the job's sampling parameters (``max_tokens`` in tokens). After ``timeout_s``
    seconds without a terminal event the generation is ended with a ``queue_timeout``
    error (and cancelled) and the result carries that ``error_code``; the partial text
    is returned but is not ``complete``.

    ``background``: the job goes to the pool's background lane, behind every job a
    person waits on; a worker may stop it for one (``error preempted``), and it is
    then sent again as a new job, from the start, until ``timeout_s`` runs out.
    """
    deadline = time.time() + timeout_s
    while True:
        now = time.time()
        job = job_build(
            messages=messages,
            params=params,
            timeout_s=deadline - now,
            user_ref=user_ref,
            enqueued_at=now,
        )
        job_enqueue(pool=pool, job=job, background=background)
        end = _generation_wait(job_id=job.job_id, deadline=deadline)
        if not end.ended:
            generation_fail(
                job_id=job.job_id,
                code=protocol.ERROR_QUEUE_TIMEOUT,
                message="The background generation timed out.",
                ttl_s=stream_ttl_s,
            )
            end.finish_reason = FINISH_ERROR
            end.error_code = protocol.ERROR_QUEUE_TIMEOUT
        if end.error_code != protocol.ERROR_PREEMPTED or time.time() >= deadline:
            return end


def _generation_wait(*, job_id: str, deadline: float) -> GenerationEnd:
    """Read ``job_id``'s stream until its terminal event or ``deadline`` (epoch s);
    return :func:`inference.jobs.events_fold` of what was read (with ``job_id``)."""
    client = redis_sync()
    key = keys.gen_key(job_id)
    last = protocol.STREAM_START
    events: list[protocol.Event] = []
    while True:
        block_ms = max(1, int(min(1.0, deadline - time.time()) * 1000))
        read = cast(
            redis_types.StreamRead,
            client.xread({key: last}, count=1024, block=block_ms),
        )
        for _key, entries in read or []:
            for entry_id, fields in entries:
                last = entry_id
                events.append(protocol.event_parse(entry_id, fields))
        if any(e.is_terminal for e in events) or time.time() >= deadline:
            break
    end = events_fold(events)
    end.job_id = job_id
    return end
