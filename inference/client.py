"""What the rest of the product calls to use the inference tier over Redis (past 400
lines on purpose: every command the web tier sends about a job, and the scripts that
must agree with the worker's, in one place).

Enqueue a job, cancel it, read its event stream (sync for finalisation, async for the
SSE relay), attach/detach stream watchers, check pool liveness, end a generation that
can no longer finish (the watchdog) and run a background generation to its end
(:func:`generation_run`). Helpers named ``*_on`` take a sync or an async client, so
the sync and async callers send the same commands. Key names and event
shapes come from :mod:`inference.protocol`.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Any, cast

import redis.asyncio as aioredis

from inference import keys, protocol, redis_types
from inference.connections import redis_async, redis_sync
from inference.events_read import generation_events_many
from inference.jobs import FINISH_ERROR, GenerationEnd, events_fold, job_build
from inference.steps import pipelined

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
    *,
    pool: str,
    job: protocol.Job,
    client: Any = None,
    background: bool = False,
    worker: str | None = None,
) -> Any:
    """Append a job to its pool's queue stream; return the queue entry id.

    ``client``: a pipeline to queue the command on (then the id is the pipeline's
    result); default: the process's sync client, at once. ``background``: the pool's
    background lane (:func:`inference.keys.background_queue_key`) instead.
    ``worker``: that worker's own stream instead (conversation affinity,
    :func:`inference.affinity.job_route` chose it).
    """
    if worker:
        from inference.affinity import worker_enqueue

        return worker_enqueue(client or redis_sync(), pool=pool, worker=worker, job=job)
    queue = keys.background_queue_key(pool) if background else keys.queue_key(pool)
    return (client or redis_sync()).xadd(queue, job.to_fields())


def pool_load(*, pool: str, now: float | None = None) -> tuple[int, int | None]:
    """Return ``(live workers, waiting jobs)`` of ``pool`` in one round trip.

    Live: a heartbeat in the last WORKER_TTL_S s. Waiting: entries of the queue not yet
    delivered to a worker (the consumer group's lag); 0 without a queue; None when
    Redis cannot say (no group yet, or a lag it does not know): count them then.
    """
    with redis_sync().pipeline(transaction=False) as pipe:
        pool_load_queue(pipe, pool=pool, now=now)
        replies = pipe.execute(raise_on_error=False)
    return pool_load_parse(replies)


def pool_load_queue(pipe: Any, *, pool: str, now: float | None = None) -> None:
    """Queue on ``pipe`` (a pipeline) the two commands of :func:`pool_load` for
    ``pool``; :func:`pool_load_parse` reads their replies."""
    workers_live_on(pipe, pool=pool, now=now)
    pipe.xinfo_groups(keys.queue_key(pool))


def pool_load_parse(replies: list[Any]) -> tuple[int, int | None]:
    """Return :func:`pool_load`'s ``(live, waiting)`` from the two replies queued by
    :func:`pool_load_queue` (read with ``raise_on_error=False``); re-raises a reply's
    error other than a missing queue."""
    live, groups = replies
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


def workers_live_on(client: Any, *, pool: str, now: float | None = None) -> Any:
    """Ask ``client`` how many workers of ``pool`` sent a heartbeat in the last
    WORKER_TTL_S seconds before ``now`` (epoch s, default now).

    ``client``: a sync client (returns the count), an async one (returns an awaitable
    of it) or a pipeline (queues the command).
    """
    now = time.time() if now is None else now
    return client.zcount(keys.workers_key(pool), now - WORKER_TTL_S, "+inf")


def workers_live(*, pool: str, now: float | None = None) -> int:
    """Return how many workers of ``pool`` are live (:func:`workers_live_on`, sync)."""
    return int(workers_live_on(redis_sync(), pool=pool, now=now))


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


# How many waiting entries a queue-position scan reads at most: admission control
# keeps a pool's queue short, so a longer queue is reported as "more than this"
# (inference.waiting.aqueue_position).
QUEUE_POSITION_SCAN_MAX = 500


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


QUEUE_TIMEOUT_MESSAGE = (
    "The model is busy: no worker could take this request in time. "
    "Please try again in a moment."
)
NO_WORKER_MESSAGE = (
    "The model is not available right now (no inference worker is running). "
    "Please try again later."
)
# The ``error`` event's message, by the code the watchdog ends a generation with.
WATCHDOG_MESSAGES = {
    protocol.ERROR_QUEUE_TIMEOUT: QUEUE_TIMEOUT_MESSAGE,
    protocol.ERROR_NO_WORKER: NO_WORKER_MESSAGE,
}


@dataclass(frozen=True)
class Watch:
    """What the watchdog needs of a generation: its ``job_id`` and ``pool``, its
    enqueue time ``enqueued_at`` (epoch s) and the limits in seconds."""

    job_id: str
    pool: str
    enqueued_at: float
    queue_timeout_s: float
    no_worker_grace_s: float

    def due(self, *, now: float, started: bool, last_event_at: float) -> str | None:
        """Return the rule that may end the generation at ``now`` (epoch s).

        :data:`protocol.ERROR_QUEUE_TIMEOUT`: not ``started`` by a worker within
        ``queue_timeout_s`` of the enqueue (it ends then);
        :data:`protocol.ERROR_NO_WORKER`: nothing arrived for ``no_worker_grace_s``
        since ``last_event_at`` (epoch s; it ends if the pool has no live worker);
        None: neither. Pure: no I/O.
        """
        if not started and now - self.enqueued_at > self.queue_timeout_s:
            return protocol.ERROR_QUEUE_TIMEOUT
        if now - last_event_at > self.no_worker_grace_s:
            return protocol.ERROR_NO_WORKER
        return None


def generation_watchdog(
    watch: Watch, *, started: bool, last_event_at: float, now: float | None = None
) -> str | None:
    """End a generation that can no longer finish (:meth:`Watch.due`, the pool's
    liveness asked only then); return the error code written, or None (sync)."""
    now = time.time() if now is None else now
    code = watch.due(now=now, started=started, last_event_at=last_event_at)
    if code is None or (
        code == protocol.ERROR_NO_WORKER and workers_live(pool=watch.pool, now=now)
    ):
        return None
    written = generation_fail(
        job_id=watch.job_id, code=code, message=WATCHDOG_MESSAGES[code]
    )
    return code if written else None


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
