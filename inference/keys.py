"""Every Redis key the product writes (past 400 lines on purpose: one module names
every key, its slot tag, owner and TTL, so nothing else builds a key by hand).

Nothing else builds a key by hand.

Kept as one module past 400 lines on purpose (issue 28: one module names every key):
a reader finds every key, its type, owner, TTL and hash tag here, and a test checks
them all against one slot per script.

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

Inference (owner :mod:`inference`; TTLs in INFERENCE_STREAM_TTL_S unless said):

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

Gateway (owner :mod:`gateway`):

- ``gw:quota:{u:<user>}:m:<epoch_minute>`` / ``:d:<YYYYMMDD>`` / ``:M:<YYYYMM>``:
  integer, tokens charged in that UTC window (reservations included); expires 60 s
  after the window ends.
- ``gw:res:{u:<user>}:<job>``: hash ``amount, k1, k2, k3``, an unsettled reservation
  (tokens) and the window counters it charged; deleted on settlement, TTL
  ``quota.RESERVATION_TTL_S``. Tagged by user: settling moves the user's counters.
- ``gw:resv:{u:<user>}``: sorted set, job id -> reservation time (epoch s), the
  user's unsettled reservations (what a quota reset counts); TTL as above.
- ``gw:unsubmitted:{r:<n>}`` (n < :data:`UNSUBMITTED_BUCKETS`): sorted set,
  ``<user>:<job>`` -> reservation time, reservations whose job was not submitted
  yet (the sweep's list). No TTL (entries leave one by one).
- ``gw:rpm:{u:<user>}:u:<epoch_minute>`` / ``gw:rpm:{u:<user>}:k:<key_id>:<epoch_minute>``:
  integer, API requests of the user / of one of its keys in a UTC minute.
- ``gw:cache:exact:<sha256>``: string, a cached answer (GATEWAY_CACHE_TTL_S).
- ``gw:cache:pending:{<job>}``, ``gw:job:{<job>}``, ``gw:retries:{<job>}``: a job's
  cache material, its JSON for a fallback retry, its retry count.
- ``ratelimit:refused:<group>:<digest>``: string, a session's rate-limit refusal.
- ``login:failures:{l:<digest>}`` (integer) / ``login:locked:{l:<digest>}`` (string):
  failed logins of one name, and its lockout.

Safety (owner :mod:`safety`): ``safety:verdict:<backend>:<sha256>`` (string, JSON
verdict) and ``safety:vector:<sha256>`` (string, an embedding), caches read with
:func:`mget_all`.

Conversations (owner :mod:`conversations`): ``chat:toolbusy:{c:<conversation>}``,
``chat:toolstep:{m:<message>}`` (and its ``:run`` lock), ``chat:toolparams:{m:<message>}``,
``chat:toolstop:{m:<message>}``: a tool step's state, CHAT_TOOL_STEP_TTL_S.

Django's cache (django-ratelimit's counters, the cache framework) names its own keys
under the ``cache`` prefix; the product and django-ratelimit use single-key commands
only (GET, SET NX, INCR, EXISTS, DELETE), so any key is safe on a cluster; on a
cluster :class:`chatsite.redis_cluster.ClusterCache` splits ``get_many``/``set_many``
by slot. Celery's broker keys (kombu's Redis transport: queue lists, ``unacked``,
``_kombu.*``) are kombu's: on a cluster they all carry kombu's ``global_keyprefix``
``{celery}:`` (:mod:`chatsite.kombu_cluster`), one slot, since kombu reads several
queues per command.

A DEL, UNLINK or EXISTS of keys in several slots is split per slot by redis-py's
cluster client (not atomic): it is used only for clean-ups. MGET goes through
:func:`mget_all`, a pattern SCAN through :func:`scan_iter_all`, an EVAL that may be
pipelined through :func:`eval_on`.
"""

from __future__ import annotations

import datetime as dt
import zlib
from collections.abc import Iterator
from typing import Any

# --- tags -----------------------------------------------------------------------


def job_tag(job_id: str) -> str:
    """Return the hash tag of a job's keys: its group (before the first ``.``) or its id."""
    return job_id.split(".", 1)[0]


def _job(job_id: str) -> str:
    tag = job_tag(job_id)
    return f"{{{tag}}}{job_id[len(tag) :]}"


def job_ids_grouped(base: str, count: int) -> list[str]:
    """Return ``count`` job ids ``<base>.<n>`` whose keys share one slot (one request's
    jobs, read together by one XREAD)."""
    return [f"{base}.{n}" for n in range(count)]


def _user(user_id: int) -> str:
    return f"{{u:{user_id}}}"


def _pool(pool: str) -> str:
    return f"{{p:{pool}}}"


# --- inference ------------------------------------------------------------------

QUEUE_KEY_PATTERN = "inf:q:*"
WORKERS_KEY_PATTERN = "inf:workers:*"
GEN_KEY_PATTERN = "inf:gen:*"


def queue_key(pool: str) -> str:
    """Return the job stream of a pool."""
    return f"inf:q:{_pool(pool)}"


def background_queue_key(pool: str) -> str:
    """Return the background lane of a pool (outside ``inf:q:*``: not a pool of its own)."""
    return f"inf:qb:{_pool(pool)}"


def worker_queue_key(pool: str, worker_id: str) -> str:
    """Return the own job stream of one worker of ``pool`` (conversation affinity):
    tagged per pool, so the worker reads it with the pool's queues in one XREADGROUP
    and the sweep moves an overdue job from it to the pool's queue in one script."""
    return f"inf:qw:{_pool(pool)}:{worker_id}"


def worker_queue_prefix(pool: str) -> str:
    """Return how the keys of :func:`worker_queue_key` of ``pool`` begin."""
    return f"inf:qw:{_pool(pool)}:"


def worker_queues_key(pool: str) -> str:
    """Return the set of the worker ids of ``pool`` that have an own job stream."""
    return f"inf:qws:{_pool(pool)}"


def affinity_key(pool: str, affinity: str) -> str:
    """Return the key holding the worker that last served conversation ``affinity``
    on ``pool`` (tagged per conversation: the map spreads over a cluster)."""
    return f"inf:aff:{pool}:{{a:{affinity}}}"


def affinity_sweep_key(pool: str) -> str:
    """Return the lock under which one worker of ``pool`` sweeps the own streams."""
    return f"inf:affsweep:{_pool(pool)}"


def workers_key(pool: str) -> str:
    """Return the heartbeat sorted set of a pool's workers."""
    return f"inf:workers:{_pool(pool)}"


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
    return f"inf:gen:{_job(job_id)}"


def final_key(job_id: str) -> str:
    """Return the key that marks a generation's terminal event as written."""
    return f"inf:final:{_job(job_id)}"


def cancel_key(job_id: str) -> str:
    """Return the cancel flag of a generation."""
    return f"inf:cancel:{_job(job_id)}"


def watch_key(job_id: str) -> str:
    """Return the count of SSE clients attached to a generation."""
    return f"inf:watch:{_job(job_id)}"


def detached_key(job_id: str) -> str:
    """Return the cancel deadline (epoch s) of an unwatched generation."""
    return f"inf:detached:{_job(job_id)}"


def moderation_key(job_id: str) -> str:
    """Return the hash of a generation's output-moderation decisions.

    Field: a window's index (0, 1, ...); value: its decision as JSON
    (:class:`safety.output.WindowDecision`), written once (HSETNX) by whoever checks it
    first, so every replay and resume cuts at the same place.
    """
    return f"inf:mod:{_job(job_id)}"


def attempts_key(job_id: str) -> str:
    """Return the count of a job's crash-recovery retries."""
    return f"inf:attempts:{_job(job_id)}"


def hub_wake_key(hub_id: str) -> str:
    """Return the wake-up stream of one web process's stream hub (``hub_id``: random)."""
    return f"inf:hubwake:{{h:{hub_id}}}"


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


# --- gateway: quotas ------------------------------------------------------------

UNSUBMITTED_BUCKETS = 16
RESERVATION_KEY_PATTERN = "gw:res:*"


def quota_minute_key(user_id: int, epoch_minute: int) -> str:
    """Return the counter of a user's tokens in one UTC minute (epoch s // 60)."""
    return f"gw:quota:{_user(user_id)}:m:{epoch_minute}"


def quota_day_key(user_id: int, day: dt.date) -> str:
    """Return the counter of a user's tokens in one UTC day."""
    return f"gw:quota:{_user(user_id)}:d:{day:%Y%m%d}"


def quota_month_key(user_id: int, month: dt.date) -> str:
    """Return the counter of a user's tokens in the UTC calendar month of ``month``."""
    return f"gw:quota:{_user(user_id)}:M:{month:%Y%m}"


def quota_user_pattern(user_id: int) -> str:
    """Return a SCAN pattern matching every quota counter of a user."""
    return f"gw:quota:{_user(user_id)}:*"


def reservation_key(user_id: int, job_id: str) -> str:
    """Return the hash of a job's unsettled reservation (in its user's slot)."""
    return f"gw:res:{_user(user_id)}:{job_id}"


def reservations_key(user_id: int) -> str:
    """Return the sorted set of a user's unsettled reservations (job id -> epoch s)."""
    return f"gw:resv:{_user(user_id)}"


def unsubmitted_key(job_id: str) -> str:
    """Return the sweep bucket listing a job's reservation until it is submitted."""
    bucket = zlib.crc32(job_id.encode()) % UNSUBMITTED_BUCKETS
    return f"gw:unsubmitted:{{r:{bucket}}}"


def unsubmitted_keys() -> list[str]:
    """Return every sweep bucket (:func:`unsubmitted_key`)."""
    return [f"gw:unsubmitted:{{r:{n}}}" for n in range(UNSUBMITTED_BUCKETS)]


def unsubmitted_member(user_id: int, job_id: str) -> str:
    """Return a sweep bucket's member for a reservation (``<user>:<job>``)."""
    return f"{user_id}:{job_id}"


def unsubmitted_member_parse(member: str) -> tuple[int, str]:
    """Return ``(user_id, job_id)`` of a sweep bucket's member."""
    user, _, job_id = member.partition(":")
    return int(user), job_id


# --- gateway: API request rates, caches, fallback, rate-limit marks ---------------------


def rpm_user_key(user_id: int, epoch_minute: int) -> str:
    """Return the API requests of ``user_id`` in one UTC minute (epoch s // 60)."""
    return f"gw:rpm:{_user(user_id)}:u:{epoch_minute}"


def rpm_key_key(user_id: int, key_id: int, epoch_minute: int) -> str:
    """Return the API requests of ``user_id``'s API key ``key_id`` in one UTC minute
    (in the user's slot: one script counts both)."""
    return f"gw:rpm:{_user(user_id)}:k:{key_id}:{epoch_minute}"


CACHE_KEY_PATTERN = "gw:cache:*"
CACHE_EXACT_KEY_PATTERN = "gw:cache:exact:*"
CACHE_PENDING_KEY_PATTERN = "gw:cache:pending:*"


def cache_exact_key(digest: str) -> str:
    """Return an exact-cache entry (``digest``: SHA-256 hex of the request)."""
    return f"gw:cache:exact:{digest}"


def cache_pending_key(job_id: str) -> str:
    """Return an admitted request's cache material, kept until settlement."""
    return f"gw:cache:pending:{_job(job_id)}"


def job_key(job_id: str) -> str:
    """Return a submitted job's JSON (for a fallback retry)."""
    return f"gw:job:{_job(job_id)}"


def retries_key(job_id: str) -> str:
    """Return the count of a job's fallback retries."""
    return f"gw:retries:{_job(job_id)}"


def ratelimit_refused_key(group: str, digest: str) -> str:
    """Return the mark of a session refused by rate-limit ``group`` (``digest``: of its
    session key)."""
    return f"ratelimit:refused:{group}:{digest}"


def login_failures_key(digest: str) -> str:
    """Return the failed-login count of one login name (``digest``: of the name)."""
    return f"login:failures:{{l:{digest}}}"


def login_locked_key(digest: str) -> str:
    """Return the lockout mark of one login name (its failures' slot)."""
    return f"login:locked:{{l:{digest}}}"


# --- safety -------------------------------------------------------------------


def verdict_key(backend: str, digest: str) -> str:
    """Return a cached moderation verdict (``digest``: SHA-256 hex of the text)."""
    return f"safety:verdict:{backend}:{digest}"


def vector_key(digest: str) -> str:
    """Return a cached moderation embedding (``digest``: SHA-256 hex of the text)."""
    return f"safety:vector:{digest}"


# --- conversations --------------------------------------------------------------


def tool_busy_key(conversation_id: Any) -> str:
    """Return the mark of a conversation whose tool step runs (value: message id)."""
    return f"chat:toolbusy:{{c:{conversation_id}}}"


def tool_step_key(message_id: Any) -> str:
    """Return the state of a message's tool step (JSON)."""
    return f"chat:toolstep:{{m:{message_id}}}"


def tool_step_run_key(message_id: Any) -> str:
    """Return the once-only lock of a message's tool step run (SET NX)."""
    return f"{tool_step_key(message_id)}:run"


def tool_params_key(message_id: Any) -> str:
    """Return the sampling parameters a message's tool loop continues with (JSON)."""
    return f"chat:toolparams:{{m:{message_id}}}"


def tool_stop_key(message_id: Any) -> str:
    """Return the stop flag of a message's tool step."""
    return f"chat:toolstop:{{m:{message_id}}}"


# --- commands that must work on a cluster ------------------------------------------


def eval_on(client: Any, script: str, numkeys: int, *keys_and_args: Any) -> Any:
    """Run (client) or queue (pipeline) ``EVAL script numkeys *keys_and_args``.

    Works on a plain or cluster client or pipeline, sync or async: redis-py's cluster
    pipeline has no ``eval()`` but routes the raw command by its KEYS (which must be
    in one slot).
    """
    return client.execute_command("EVAL", script, numkeys, *keys_and_args)


def scan_iter_all(client: Any, match: str, **kwargs: Any) -> Iterator[Any]:
    """Yield every key matching ``match`` (a SCAN pattern) on every master.

    ``kwargs`` go to redis-py's ``scan_iter`` (``count``, ``_type``). Every pattern
    SCAN of the product goes through here.
    """
    return iter(client.scan_iter(match=match, **kwargs))


def mget_all(client: Any, keys: list[str]) -> Any:
    """Return the values of ``keys`` (None where absent), in order, whatever their slots.

    A cluster client's ``mget_nonatomic`` splits the read per slot; a single node's
    MGET is one command. Works with a sync or an async client (then awaitable).
    """
    mget = getattr(client, "mget_nonatomic", None) or client.mget
    return mget(keys)
