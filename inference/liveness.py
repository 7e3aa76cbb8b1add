"""Whether a pool can serve: its live workers (heartbeats) and the jobs waiting in its
queue (admission control, the readiness check, the watchdog, and callers that refuse
work while a pool has no worker).

A worker beats every ``heartbeat_s`` seconds (:mod:`inference.worker_loops`): its score
in the pool's ``inf:workers`` sorted set is the epoch second of its last beat, and a
score older than :data:`WORKER_TTL_S` means the worker is gone. Helpers named ``*_on``
take a sync or an async client, so the sync and async callers send the same commands.
"""

from __future__ import annotations

import time
from typing import Any

from inference import keys, protocol
from inference.connections import redis_sync

# Heartbeats older than this (seconds) mean the worker is gone. Workers beat every 2 s.
WORKER_TTL_S = 10.0


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
