"""Every Redis key the product writes, named in this package (one module per owner),
so nothing else builds a key by hand: import the package, ``keys.gen_key(job_id)``.

Keys are Redis Cluster safe: keys that one Lua script, one MULTI/EXEC or one
multi-key command touches together share a hash tag (the part inside the first
``{...}``, redis.io "Redis cluster specification", hash tags), so they map to one
slot. Tags: ``{u:<user_id>}`` per user, ``{<job_id>}`` per generation (a job id
``<group>.<n>`` is tagged by its group, so one request's jobs share a slot:
:func:`job_ids_grouped`), ``{p:<pool>}`` per pool, ``{w:<worker_id>}``,
``{h:<hub_id>}``, ``{c:<conversation_id>}``, ``{m:<message_id>}``,
``{l:<digest>}`` per login name, ``{r:<n>}`` per sweep bucket. A key that is only
ever used alone (answer and moderation caches) has no tag. ``tests/test_redis_keys.py``
checks every script's keys against one slot.

Each module lists its keys (type, owner, TTL, tag) in its docstring:

- :mod:`inference.keys.tier`: the inference tier's (``inf:*``), owner :mod:`inference`;
- :mod:`inference.keys.gateway`: quotas, API request rates, caches, fallback,
  rate-limit marks and sign-in lockouts (``gw:*``, ``ratelimit:*``, ``login:*``),
  owner :mod:`gateway`;
- :mod:`inference.keys.safety`: moderation caches (``safety:*``), owner :mod:`safety`;
- :mod:`inference.keys.conversations`: a tool step's state (``chat:*``), owner
  :mod:`conversations`;
- :mod:`inference.keys.tags`: the hash tags; :mod:`inference.keys.cluster`: the
  commands that must work on a cluster (EVAL, MGET, SCAN); :func:`job_keys`: every
  key of one job, whatever its owner.

Django's cache (django-ratelimit's counters, the cache framework) names its own keys
under the ``cache`` prefix; the product and django-ratelimit use single-key commands
only (GET, SET NX, INCR, EXISTS, DELETE), so any key is safe on a cluster; on a
cluster :class:`chatsite.redis_cluster.ClusterCache` splits ``get_many``/``set_many``
by slot. Celery's broker keys (kombu's Redis transport: queue lists, ``unacked``,
``_kombu.*``) are kombu's: on a cluster they all carry kombu's ``global_keyprefix``
``{celery}:`` (:mod:`chatsite.kombu_cluster`), one slot, since kombu reads several
queues per command.
"""

from __future__ import annotations

from inference.keys.cluster import (
    eval_on,
    mget_all,
    scan_iter_all,
)
from inference.keys.conversations import (
    tool_busy_key,
    tool_params_key,
    tool_step_key,
    tool_step_run_key,
    tool_stop_key,
)
from inference.keys.gateway import (
    CACHE_EXACT_KEY_PATTERN,
    CACHE_KEY_PATTERN,
    CACHE_PENDING_KEY_PATTERN,
    RESERVATION_KEY_PATTERN,
    UNSUBMITTED_BUCKETS,
    cache_exact_key,
    cache_pending_key,
    job_key,
    login_failures_key,
    login_locked_key,
    quota_day_key,
    quota_minute_key,
    quota_month_key,
    quota_user_pattern,
    ratelimit_refused_key,
    reservation_key,
    reservations_key,
    retries_key,
    rpm_key_key,
    rpm_user_key,
    unsubmitted_key,
    unsubmitted_keys,
    unsubmitted_member,
    unsubmitted_member_parse,
)
from inference.keys.safety import (
    vector_key,
    verdict_key,
)
from inference.keys.tags import (
    job_ids_grouped,
    job_tag,
)
from inference.keys.tier import (
    GEN_KEY_PATTERN,
    QUEUE_KEY_PATTERN,
    WORKERS_KEY_PATTERN,
    affinity_key,
    affinity_sweep_key,
    attempts_key,
    background_queue_key,
    cancel_key,
    detached_key,
    final_key,
    gen_key,
    hub_wake_key,
    moderation_key,
    pool_from_queue_key,
    pool_from_workers_key,
    queue_key,
    watch_key,
    worker_key,
    worker_queue_key,
    worker_queue_prefix,
    worker_queues_key,
    workers_key,
)


def job_keys(job_id: str) -> list[str]:
    """Return every key of one job (all in its slot), for a purge."""
    return [
        gen_key(job_id),
        final_key(job_id),
        cancel_key(job_id),
        watch_key(job_id),
        detached_key(job_id),
        moderation_key(job_id),
        attempts_key(job_id),
        cache_pending_key(job_id),
        job_key(job_id),
        retries_key(job_id),
    ]


__all__ = [
    "job_tag",
    "job_ids_grouped",
    "QUEUE_KEY_PATTERN",
    "WORKERS_KEY_PATTERN",
    "GEN_KEY_PATTERN",
    "queue_key",
    "background_queue_key",
    "worker_queue_key",
    "worker_queue_prefix",
    "worker_queues_key",
    "affinity_key",
    "affinity_sweep_key",
    "workers_key",
    "pool_from_queue_key",
    "pool_from_workers_key",
    "worker_key",
    "gen_key",
    "final_key",
    "cancel_key",
    "watch_key",
    "detached_key",
    "moderation_key",
    "attempts_key",
    "hub_wake_key",
    "job_keys",
    "UNSUBMITTED_BUCKETS",
    "RESERVATION_KEY_PATTERN",
    "quota_minute_key",
    "quota_day_key",
    "quota_month_key",
    "quota_user_pattern",
    "reservation_key",
    "reservations_key",
    "unsubmitted_key",
    "unsubmitted_keys",
    "unsubmitted_member",
    "unsubmitted_member_parse",
    "rpm_user_key",
    "rpm_key_key",
    "CACHE_KEY_PATTERN",
    "CACHE_EXACT_KEY_PATTERN",
    "CACHE_PENDING_KEY_PATTERN",
    "cache_exact_key",
    "cache_pending_key",
    "job_key",
    "retries_key",
    "ratelimit_refused_key",
    "login_failures_key",
    "login_locked_key",
    "verdict_key",
    "vector_key",
    "tool_busy_key",
    "tool_step_key",
    "tool_step_run_key",
    "tool_params_key",
    "tool_stop_key",
    "eval_on",
    "scan_iter_all",
    "mget_all",
]
