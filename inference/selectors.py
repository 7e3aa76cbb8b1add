"""Read-only views of the inference tier's state in Redis (``manage.py inference_status``).

Counts come from the keys of :mod:`inference.keys`: heartbeats (``inf:workers:{pool}``),
slot hashes (``inf:worker:{id}``) and the queue streams (``inf:q:{pool}``, whose handled
entries workers delete, so length − pending = waiting).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any, cast

from redis.exceptions import ResponseError

from inference import keys, protocol, redis_types
from inference.connections import redis_sync
from inference.liveness import WORKER_TTL_S


@dataclass
class WorkerStatus:
    """One live worker: its id, kind (``chat`` or ``embedding``), engine and model, its
    job slots, and for an embedding worker the vectors' dimension."""

    worker_id: str
    engine: str
    model: str
    slots: int
    busy: int
    heartbeat_age_s: float
    kind: str = "chat"
    dim: int | None = None


@dataclass
class PoolStatus:
    """A pool's fleet and backlog at one instant.

    ``waiting``: jobs queued and not yet taken; ``running``: taken and not acknowledged
    (the consumer group's pending entries, including those of dead workers awaiting
    recovery); ``kind`` is what the live workers serve (``chat``/``embedding``, "" with
    none live); ``oldest_waiting_s``: age of the oldest waiting job in seconds (None when
    none waits); slot counts are summed over live workers.
    """

    pool: str
    kind: str = ""
    workers: list[WorkerStatus] = field(default_factory=list)
    slots: int = 0
    busy: int = 0
    waiting: int = 0
    running: int = 0
    oldest_waiting_s: float | None = None

    @property
    def live_workers(self) -> int:
        """Workers whose heartbeat is younger than WORKER_TTL_S."""
        return len(self.workers)

    @property
    def free(self) -> int:
        """Free slots across live workers."""
        return max(0, self.slots - self.busy)

    def as_dict(self) -> dict[str, Any]:
        """Plain data for JSON output."""
        return {
            **asdict(self),
            "live_workers": self.live_workers,
            "free": self.free,
        }


def pools_list() -> list[str]:
    """Return the names of pools that have a queue or a heartbeat set, sorted."""
    client = redis_sync()
    pools = {
        keys.pool_from_queue_key(k)
        for k in keys.scan_iter_all(client, keys.QUEUE_KEY_PATTERN, _type="stream")
    }
    pools |= {
        keys.pool_from_workers_key(k)
        for k in keys.scan_iter_all(client, keys.WORKERS_KEY_PATTERN, _type="zset")
    }
    return sorted(pools)


def pool_status(*, pool: str, worker_ttl_s: float = WORKER_TTL_S) -> PoolStatus:
    """Return live workers, slots, queue depth and oldest waiting job age of ``pool``.

    Ages use the Redis server clock (stream ids are its milliseconds). A worker is live
    when its heartbeat is younger than ``worker_ttl_s`` seconds.
    """
    client = redis_sync()
    server_s, server_us = client.time()
    now = server_s + server_us / 1e6
    local_now = time.time()
    status = PoolStatus(pool=pool)
    beats = client.zrangebyscore(
        keys.workers_key(pool), local_now - worker_ttl_s, "+inf", withscores=True
    )
    # decoded replies (inference.connections): (member, score) pairs, a str hash
    for worker_id, beat in cast(list[tuple[str, float]], beats):
        info = cast(dict[str, str], client.hgetall(keys.worker_key(worker_id)))
        worker = WorkerStatus(
            worker_id=worker_id,
            engine=info.get("engine", ""),
            model=info.get("model", ""),
            slots=int(info.get("slots", 0)),
            busy=int(info.get("busy", 0)),
            heartbeat_age_s=round(max(0.0, local_now - beat), 3),
            kind=info.get("kind", "chat"),
            dim=int(info["dim"]) if info.get("dim") else None,
        )
        status.kind = status.kind or worker.kind
        status.workers.append(worker)
        status.slots += worker.slots
        status.busy += worker.busy
    queue = keys.queue_key(pool)
    try:
        groups = client.xinfo_groups(queue)
    except ResponseError:
        return status  # no queue yet
    group = next((g for g in groups if g["name"] == protocol.GROUP), None)
    length = client.xlen(queue)
    first: list[redis_types.StreamEntry]
    if group is None:
        status.waiting = length
        first = cast(list[redis_types.StreamEntry], client.xrange(queue, count=1))
    else:
        status.running = int(group["pending"])
        status.waiting = max(0, length - status.running)
        after = f"({group['last-delivered-id']}"
        first = cast(
            list[redis_types.StreamEntry], client.xrange(queue, min=after, count=1)
        )
    if first and status.waiting:
        entry_ms = int(first[0][0].split("-")[0])
        status.oldest_waiting_s = round(max(0.0, now - entry_ms / 1000), 3)
    return status
