"""The inference tier's Redis keys (owner :mod:`inference`; TTLs in
INFERENCE_STREAM_TTL_S unless said). Part of :mod:`inference.keys`.

- ``inf:q:{p:<pool>}`` / ``inf:qb:{p:<pool>}``: stream, a pool's jobs / its
  background lane (:mod:`inference.protocol` gives the entry format). No TTL.
- ``inf:workers:{p:<pool>}``: sorted set, worker id -> last heartbeat (epoch s).
- ``inf:worker:{w:<worker_id>}``: hash, one worker's slots and state; expires with
  its heartbeats.
- ``inf:gen:{<job>}``: stream, one generation's events; expires ``stream_ttl``
  after its terminal event.
- ``inf:final:{<job>}`` (string, the terminal event is written), ``inf:cancel:{<job>}``
  (string, stop asked), ``inf:watch:{<job>}`` (integer, SSE clients attached),
  ``inf:detached:{<job>}`` (string, cancel deadline epoch s), ``inf:mod:{<job>}``
  (hash, output-moderation decision per window), ``inf:attempts:{<job>}`` (integer,
  crash-recovery retries).
- ``inf:qw:{p:<pool>}:<worker_id>``: stream, one worker's own jobs (conversation
  affinity, :mod:`inference.affinity`), the queue's format and group; read before the
  pool's queue, with it in one XREADGROUP (same tag). No TTL (the sweep deletes the
  streams of workers that are gone).
- ``inf:qws:{p:<pool>}``: set, the worker ids of the pool that have an own stream.
- ``inf:aff:<pool>:{a:<affinity>}``: string, the worker that last served a
  conversation (``Job.affinity``) on a pool; expires INFERENCE_AFFINITY_TTL_S after
  its turn. Tagged per conversation: the map spreads over a cluster.
- ``inf:affsweep:{p:<pool>}``: string, the lock (SET NX PX) under which one worker of
  the pool moves overdue jobs from the own streams to the pool's queue.
- ``inf:hubwake:{h:<hub_id>}``: stream, wakes one web process's stream hub; expires
  after ``inference.streams.WAKE_TTL_S``.
"""

from __future__ import annotations

from inference.keys.tags import tagged_job, tagged_pool

QUEUE_KEY_PATTERN = "inf:q:*"
WORKERS_KEY_PATTERN = "inf:workers:*"
GEN_KEY_PATTERN = "inf:gen:*"


def queue_key(pool: str) -> str:
    """Return the job stream of a pool."""
    return f"inf:q:{tagged_pool(pool)}"


def background_queue_key(pool: str) -> str:
    """Return the background lane of a pool (outside ``inf:q:*``: not a pool of its own)."""
    return f"inf:qb:{tagged_pool(pool)}"


def worker_queue_key(pool: str, worker_id: str) -> str:
    """Return the own job stream of one worker of ``pool`` (conversation affinity):
    tagged per pool, so the worker reads it with the pool's queues in one XREADGROUP
    and the sweep moves an overdue job from it to the pool's queue in one script."""
    return f"inf:qw:{tagged_pool(pool)}:{worker_id}"


def worker_queue_prefix(pool: str) -> str:
    """Return how the keys of :func:`worker_queue_key` of ``pool`` begin."""
    return f"inf:qw:{tagged_pool(pool)}:"


def worker_queues_key(pool: str) -> str:
    """Return the set of the worker ids of ``pool`` that have an own job stream."""
    return f"inf:qws:{tagged_pool(pool)}"


def affinity_key(pool: str, affinity: str) -> str:
    """Return the key holding the worker that last served conversation ``affinity``
    on ``pool`` (tagged per conversation: the map spreads over a cluster)."""
    return f"inf:aff:{pool}:{{a:{affinity}}}"


def affinity_sweep_key(pool: str) -> str:
    """Return the lock under which one worker of ``pool`` sweeps the own streams."""
    return f"inf:affsweep:{tagged_pool(pool)}"


def workers_key(pool: str) -> str:
    """Return the heartbeat sorted set of a pool's workers."""
    return f"inf:workers:{tagged_pool(pool)}"


def _pool_of(key: str, prefix: str) -> str:
    return key.removeprefix(prefix).removeprefix("{p:").removesuffix("}")


def pool_from_queue_key(key: str) -> str:
    """Return the pool of an ``inf:q:{p:<pool>}`` key (inverse of :func:`queue_key`)."""
    return _pool_of(key, "inf:q:")


def pool_from_workers_key(key: str) -> str:
    """Return the pool of an ``inf:workers:{p:<pool>}`` key."""
    return _pool_of(key, "inf:workers:")


def worker_key(worker_id: str) -> str:
    """Return the slot-status hash of one worker."""
    return f"inf:worker:{{w:{worker_id}}}"


def gen_key(job_id: str) -> str:
    """Return the event stream of one generation."""
    return f"inf:gen:{tagged_job(job_id)}"


def final_key(job_id: str) -> str:
    """Return the key that marks a generation's terminal event as written."""
    return f"inf:final:{tagged_job(job_id)}"


def cancel_key(job_id: str) -> str:
    """Return the cancel flag of a generation."""
    return f"inf:cancel:{tagged_job(job_id)}"


def watch_key(job_id: str) -> str:
    """Return the count of SSE clients attached to a generation."""
    return f"inf:watch:{tagged_job(job_id)}"


def detached_key(job_id: str) -> str:
    """Return the cancel deadline (epoch s) of an unwatched generation."""
    return f"inf:detached:{tagged_job(job_id)}"


def moderation_key(job_id: str) -> str:
    """Return the hash of a generation's output-moderation decisions.

    Field: a window's index (0, 1, ...); value: its decision as JSON
    (:class:`safety.output.WindowDecision`), written once (HSETNX) by whoever checks it
    first, so every replay and resume cuts at the same place.
    """
    return f"inf:mod:{tagged_job(job_id)}"


def attempts_key(job_id: str) -> str:
    """Return the count of a job's crash-recovery retries."""
    return f"inf:attempts:{tagged_job(job_id)}"


def hub_wake_key(hub_id: str) -> str:
    """Return the wake-up stream of one web process's stream hub (``hub_id``: random)."""
    return f"inf:hubwake:{{h:{hub_id}}}"
