"""Gateway services: submit and cancel generations (DESIGN §4 step 2).

Current policy: route every request to the default pool (``INFERENCE_DEFAULT_POOL``) and
enqueue it with a queue deadline. Admission when a pool has no live worker is handled by
the stream watchdog (:func:`inference.client.generation_watchdog`), which ends the
generation with a clear error after a bounded wait, so a worker that is still starting
can take the job.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from inference import client as inference_client
from inference import protocol


@dataclass
class Submission:
    """Where and when a generation was queued (epoch seconds)."""

    job_id: str
    pool: str
    enqueued_at: float
    deadline: float


def pool_route(*, requested: str | None = None) -> str:
    """Return the pool a request goes to (today: the requested one or the default)."""
    return requested or settings.INFERENCE_DEFAULT_POOL


def generation_submit(
    *,
    job_id: str,
    messages: list[dict[str, str]],
    params: dict[str, Any],
    user_ref: str,
    pool: str,
    enqueued_at: float | None = None,
) -> Submission:
    """Enqueue a generation on ``pool``; the job expires INFERENCE_QUEUE_TIMEOUT_S later.

    ``messages`` are OpenAI chat messages; ``params`` are sampling parameters
    (``max_tokens`` in tokens). Call after the surrounding transaction commits.
    """
    now = time.time() if enqueued_at is None else enqueued_at
    job = protocol.Job(
        job_id=job_id,
        messages=messages,
        params=params,
        user_ref=user_ref,
        enqueued_at=now,
        deadline=now + settings.INFERENCE_QUEUE_TIMEOUT_S,
    )
    inference_client.job_enqueue(pool=pool, job=job)
    return Submission(job_id=job_id, pool=pool, enqueued_at=now, deadline=job.deadline)


def generation_cancel(*, job_id: str) -> None:
    """Ask the worker running ``job_id`` to stop; the partial answer is kept."""
    inference_client.job_cancel(job_id=job_id, ttl_s=settings.INFERENCE_STREAM_TTL_S)
