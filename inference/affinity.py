"""Conversation affinity: a conversation's next turn goes to the worker that served its
previous turn, whose engine still holds the shared history in its prefix cache
(vLLM's automatic prefix caching; llama.cpp reuses its slot's KV for the common
prompt prefix), so the follow-up prefills only its new tokens.

The path of a job (keys in :mod:`inference.protocol`):

1. The submitter names the conversation in ``Job.affinity`` (:func:`affinity_of`) and
   asks :func:`job_route` where to send it: the worker recorded under
   ``inf:aff:<pool>:{a:<affinity>}`` when that worker is live (a heartbeat within
   WORKER_TTL_S, not stopping) and not saturated (its ``busy`` slots plus the jobs
   already in its own stream below its ``slots``): then the job goes to the worker's
   own stream ``inf:qw:{p:<pool>}:<worker>``; otherwise (no worker recorded, dead,
   stopping, saturated) to the pool's queue, as without affinity. Each outcome is
   counted (``inference:affinity_routes_total``). The API's and the chat's admission
   read the recorded worker, and the state of the worker this process saw recorded
   last (:data:`_hints`), in the reservation's round trip
   (:mod:`gateway.generations.reads`): while that worker stays the recorded one, the
   route costs no round trip of its own.
2. A chat worker reads its own stream first, then the pool's queues
   (:mod:`inference.intake`). The worker that ends a job with an affinity records
   itself under the conversation's key for INFERENCE_AFFINITY_TTL_S seconds, and
   publishes its freed slot at once (``busy`` in its hash), so the next turn sees it
   free.
3. Workers stay interchangeable: every live worker of the pool runs
   :meth:`inference.affinity_sweep.AffinitySweep._affinity_sweep_loop`; under a
   per-pool lock, one of them moves every job that has waited in any worker's own
   stream longer than ``affinity_wait_s`` (undelivered: newer than the stream's
   group's last-delivered id) to the pool's queue, in one script per stream, by
   Redis's clock. So a job whose preferred worker died, stops or filled up after the
   routing decision runs elsewhere after at most ``affinity_wait_s`` +
   ``affinity_sweep_s`` seconds (INFERENCE_AFFINITY_WAIT_S, default 2 s, + 0.25 s;
   tests/inference/test_affinity.py).
   A job the dead worker had already taken is crash recovery's
   (:mod:`inference.recovery`), re-queued on the pool's queue.

Turning INFERENCE_AFFINITY off makes the submitter leave ``affinity`` empty: the job
goes to the pool's queue and its entry is byte for byte what it was without affinity.
"""

from __future__ import annotations

import hashlib
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from inference import keys, metrics, protocol
from inference.liveness import WORKER_TTL_S
from inference.redis_types import RedisFields

# Outcomes of :func:`job_route` (the ``outcome`` label of AFFINITY_ROUTES).
HIT = "hit"
MISS_NEW = "miss_new"
MISS_DEAD = "miss_dead"
MISS_SATURATED = "miss_saturated"


def affinity_of(*, user_ref: str, messages: list[dict[str, Any]]) -> str:
    """Return the affinity key of the conversation ``messages`` belong to.

    A conversation keeps its first messages across turns (DESIGN §6: the prompt
    grows at its end), so the key is the first 16 hex characters of the SHA-256 of
    ``user_ref`` (the account) and the first system and first user message: the
    same for every turn of one conversation, different across users. Two
    conversations of one user that open with the same words share a preferred worker,
    which only routes them together. "" when there is no user message.
    """
    system = next((m for m in messages if m.get("role") == "system"), None)
    user = next((m for m in messages if m.get("role") == "user"), None)
    if user is None:
        return ""
    digest = hashlib.sha256()
    for part in (user_ref, _text(system), _text(user)):
        digest.update(part.encode())
        digest.update(b"\0")
    return digest.hexdigest()[:16]


def _text(message: dict[str, Any] | None) -> str:
    if message is None:
        return ""
    content = message.get("content")
    return content if isinstance(content, str) else repr(content)


# The worker last seen recorded for a conversation on a pool, per process, at most
# _HINTS_MAX of them: a hint only. The next admission of the conversation reads that
# worker's state with the recorded worker, in the reservation's round trip
# (:meth:`AffinityRead.queue`); :func:`job_route` uses it only when the worker
# recorded then is the hinted one, else it reads the state itself as before.
_HINTS_MAX = 10_000
_hints: dict[tuple[str, str], str] = {}
_hints_lock = threading.Lock()


def _hint_set(pool: str, affinity: str, worker: str | None) -> None:
    """Remember ``worker`` (None: forget) as the conversation's hint on ``pool``."""
    with _hints_lock:
        if worker is None:
            _hints.pop((pool, affinity), None)
            return
        if len(_hints) >= _HINTS_MAX and (pool, affinity) not in _hints:
            _hints.pop(next(iter(_hints)))  # the oldest entry
        _hints[(pool, affinity)] = worker


def affinity_hints_forget() -> None:
    """Forget every hint of this process (the next read of each conversation reads
    its worker's state after, as without a hint)."""
    with _hints_lock:
        _hints.clear()


# The fields of a worker's hash that :func:`job_route` decides by.
_STATE_FIELDS = ["heartbeat", "slots", "busy", "preemptible", "stopping", "pool"]


def _state_queue(pipe: Any, *, pool: str, worker: str) -> None:
    """Queue the reads of ``worker``'s state on ``pool`` (three replies: its hash's
    :data:`_STATE_FIELDS`, its own stream's length and pending summary)."""
    pipe.hmget(keys.worker_key(worker), _STATE_FIELDS)
    own = keys.worker_queue_key(pool, worker)
    pipe.xlen(own)
    pipe.xpending(own, protocol.GROUP)


@dataclass(frozen=True)
class AffinityRead:
    """The worker recorded for the conversation ``affinity`` on ``pool``, read ahead
    of :func:`job_route` (in another round trip of the submitter's: one less);
    ``worker`` None: none recorded. ``state``: the three replies of the state reads
    (:func:`_state_queue`) of the worker ``state_of``, read in the same round trip
    (this process's hint); :func:`job_route` uses them when ``state_of`` is
    ``worker`` (None: not read)."""

    pool: str
    affinity: str
    worker: str | None
    state_of: str | None = field(default=None, compare=False)
    state: tuple[Any, ...] | None = field(default=None, compare=False)

    @staticmethod
    def queue(pipe: Any, *, pool: str, affinity: str) -> str | None:
        """Queue the read on ``pipe`` (a pipeline): its first reply is the
        ``worker``; return the worker this process last saw recorded (the hint),
        whose three state replies follow, or None (one reply only)."""
        pipe.get(keys.affinity_key(pool, affinity))
        hinted = _hints.get((pool, affinity))
        if hinted is not None:
            _state_queue(pipe, pool=pool, worker=hinted)
        return hinted

    @classmethod
    def parse(
        cls, *, pool: str, affinity: str, hinted: str | None, replies: list[Any]
    ) -> AffinityRead | None:
        """The read from the ``replies`` of :meth:`queue` (that returned
        ``hinted``); None when the worker's read failed (an Exception). A failed
        state read is dropped (:func:`job_route` reads it again)."""
        if not replies or isinstance(replies[0], Exception):
            return None
        worker = None if replies[0] is None else _s(replies[0])
        state = tuple(replies[1:4]) if hinted is not None else None
        if state is not None and (
            len(state) != 3 or any(isinstance(r, Exception) for r in state[:2])
        ):
            state = None
        return cls(
            pool=pool,
            affinity=affinity,
            worker=worker,
            state_of=hinted if state is not None else None,
            state=state,
        )


def job_route(
    client: Any,
    *,
    pool: str,
    job: protocol.Job,
    now: float | None = None,
    read: AffinityRead | None = None,
) -> str | None:
    """Return the worker whose own stream ``job`` should go to, or None (the pool).

    ``client``: a sync Redis client (two round trips: the conversation's worker, then
    its hash and own stream's length and pending count; one when ``read`` is the
    worker already read for this pool and conversation). None without
    ``job.affinity``, or on a miss: no worker recorded, its heartbeat older than
    WORKER_TTL_S seconds before ``now`` (epoch s) or it stops, or its ``busy`` slots
    plus the jobs waiting in its own stream reach its ``slots``. Counts the outcome
    in AFFINITY_ROUTES.

    No round trip at all when ``read`` also carries that worker's state
    (:attr:`AffinityRead.state`). The worker read here or in ``read`` becomes this
    process's hint for the conversation (:data:`_hints`).
    """
    if not job.affinity:
        return None
    state = None
    if read is not None and (read.pool, read.affinity) == (pool, job.affinity):
        worker = read.worker
        if worker is not None and read.state_of == worker:
            state = read.state
    else:
        worker = client.get(keys.affinity_key(pool, job.affinity))
    outcome = MISS_NEW
    if worker is not None:
        worker = _s(worker)
        if state is None:
            with client.pipeline(transaction=False) as pipe:
                _state_queue(pipe, pool=pool, worker=worker)
                state = tuple(pipe.execute(raise_on_error=False))
        outcome = _outcome(pool, state, now=time.time() if now is None else now)
    _hint_set(pool, job.affinity, worker)
    metrics.AFFINITY_ROUTES.labels(pool=pool, outcome=outcome).inc()
    return worker if outcome == HIT else None


def _outcome(pool: str, state: tuple[Any, ...], *, now: float) -> str:
    """The routing outcome for a recorded worker of ``pool`` whose state reads
    (:func:`_state_queue`) replied ``state``, at ``now`` (epoch s)."""
    (beat, slots, busy, background, stopping, its_pool), length, pending = state
    # waiting in its stream: its entries less those it took (running, or ended
    # and not yet acknowledged; a running one counts in ``busy``)
    queued = int(length) - (
        0 if isinstance(pending, Exception) else int(pending["pending"])
    )
    if (
        beat is None
        or float(beat) < now - WORKER_TTL_S
        or _s(stopping) == "1"
        or _s(its_pool) != pool
    ):
        return MISS_DEAD
    # a background job (title, summary) gives its slot to an interactive one
    if int(busy or 0) - int(background or 0) + int(queued) >= int(slots or 1):
        return MISS_SATURATED
    return HIT


def _s(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def worker_enqueue(
    client: Any,
    *,
    pool: str,
    worker: str,
    job: protocol.Job,
    entry: RedisFields | None = None,
) -> Any:
    """Queue ``job`` on ``worker``'s own stream and note the stream in the pool's set
    (``client``: a pipeline, ideally MULTI; the XADD's reply is the entry id).
    ``entry``: ``job.to_fields()`` when the caller made it already."""
    added = client.xadd(keys.worker_queue_key(pool, worker), entry or job.to_fields())
    client.sadd(keys.worker_queues_key(pool), worker)
    return added
