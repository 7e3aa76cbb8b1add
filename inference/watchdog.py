"""The watchdog: end a generation that can no longer finish, so its reader does not
wait forever.

A generation that no worker started within its queue timeout ends with ``error
queue_timeout``; one whose stream stayed quiet past a grace period while its pool has
no live worker (:mod:`inference.liveness`) ends with ``error worker_unavailable``. The
rules are :meth:`Watch.due` (pure); :func:`generation_watchdog` applies them from sync
code (settlement), :func:`inference.waiting.agen_watchdog` on the event loop (the
follower). The end is :func:`inference.client.generation_fail` (an ``error`` event
unless one exists, and the cancel flag).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from inference import protocol
from inference.client import generation_fail
from inference.liveness import workers_live

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
