"""The sweep of reservations whose web process died before submitting their job
(:mod:`gateway.quota`'s "no reservation may leak"): a Celery beat task
(``gateway.tasks``) releases each unsubmitted reservation older than
GATEWAY_RESERVATION_SUBMIT_TIMEOUT_S through the settle script at 0 tokens."""

from __future__ import annotations

import time
from typing import cast

from gateway.quota import reservation_settle
from inference import keys
from inference.connections import redis_sync


def quota_reservations_sweep(
    *, older_than_s: float, now: float | None = None, batch: int = 500
) -> int:
    """Release every unsubmitted reservation made more than ``older_than_s`` s ago.

    Such a reservation belongs to a web process that died between admission and
    submission; it would otherwise stay charged for RESERVATION_TTL_S. The sweep takes
    an entry out of its bucket first (ZREM: a job submitted meanwhile has left it, and
    is never touched), then releases it with the settle script at 0 tokens, so it is
    idempotent and a late settlement cannot also apply. An entry whose reservation is
    gone (expired) is only removed. ``now``: epoch s (default: the current time);
    ``batch``: entries read per round trip. Returns how many reservations were
    released.
    """
    now = time.time() if now is None else now
    cutoff = now - older_than_s
    client = redis_sync()
    released = 0
    for bucket in keys.unsubmitted_keys():
        while True:
            members = cast(
                list[str],
                client.zrangebyscore(bucket, "-inf", cutoff, start=0, num=batch),
            )
            for member in members:
                if not client.zrem(bucket, member):
                    continue  # submitted or settled since it was read
                user_id, job_id = keys.unsubmitted_member_parse(member)
                released += (
                    reservation_settle(client, user_id=user_id, job_id=job_id, tokens=0)
                    >= 0
                )
            if len(members) < batch:
                break
    return released
