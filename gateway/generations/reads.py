"""What admission reads of other Redis slots in the token reservation's round trip.

The reservation (:func:`gateway.quota.quota_reserve`) is one script on the user's
slot; the reads below are queued in the same pipeline (:class:`gateway.quota.Piggyback`),
so admitting a request costs one round trip, not three: the routed pool's load
(admission control, :func:`gateway.routing.pool_admit`) and, with INFERENCE_AFFINITY,
the worker recorded for the conversation on that pool with, when this process saw
one recorded before, that worker's state (the submission's routing,
:func:`inference.affinity.job_route`: no round trip of its own when the worker is
still the one recorded).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings

from gateway import quota
from inference import affinity, liveness
from inference.affinity import AffinityRead


class AdmissionReads:
    """The reads of one admission, for the routed pool ``pool`` (a pool name), the
    user ``user_id`` and the request's ``messages``. Pass :attr:`piggyback` to the
    reservation, then read :meth:`load` and :meth:`affinity`."""

    def __init__(self, *, pool: str, user_id: int, messages: list[dict[str, Any]]):
        self.pool = pool
        self.conversation = (
            affinity.affinity_of(user_ref=str(user_id), messages=messages)
            if settings.INFERENCE_AFFINITY
            else ""
        )
        self.hinted: str | None = None
        self.piggyback = quota.Piggyback(queue=self._queue)

    def _queue(self, pipe: Any) -> None:
        liveness.pool_load_queue(pipe, pool=self.pool)
        if self.conversation:
            self.hinted = AffinityRead.queue(
                pipe, pool=self.pool, affinity=self.conversation
            )

    def load(self) -> tuple[int, int | None] | None:
        """The pool's ``(live workers, waiting jobs)``
        (:func:`inference.liveness.pool_load`); None when it was not read. Raises the
        read's Redis error."""
        replies = self.piggyback.replies
        return liveness.pool_load_parse(replies[:2]) if replies else None

    def affinity(self) -> AffinityRead | None:
        """The conversation's recorded worker on the pool (None: not read, or the
        read failed: the submission reads it again)."""
        if not self.conversation:
            return None
        return AffinityRead.parse(
            pool=self.pool,
            affinity=self.conversation,
            hinted=self.hinted,
            replies=self.piggyback.replies[2:],
        )
