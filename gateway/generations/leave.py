"""A consumer left a non-resumable generation (the API's client went away): cancel it
and settle it once (:func:`generation_leave`), from the worker's terminal event when one
comes within API_CANCEL_SETTLE_WAIT_S seconds, else as cancelled with the completion
tokens relayed so far. :func:`gateway.generations.follow.generation_follow` calls it when
its consumer stops iterating early.
"""

from __future__ import annotations

import logging
import time

from asgiref.sync import sync_to_async
from django.conf import settings

from chatsite.db import db_brief
from gateway.generations.outcome import Outcome
from gateway.generations.settle import BACKEND_ERRORS, Recorder, outcome_settle
from gateway.generations.settle_bulk import asettle_retrying
from gateway.generations.start import Generation, generation_cancel
from gateway.models import UsageRecord
from inference import client as inference_client
from inference import protocol

logger = logging.getLogger(__name__)


async def generation_leave(
    generation: Generation,
    *,
    after: str = protocol.STREAM_START,
    tokens_seen: int = 0,
    recorder: Recorder | None = None,
) -> None:
    """The consumer left a non-resumable generation: cancel it and settle it once.

    Waits up to API_CANCEL_SETTLE_WAIT_S seconds for the worker's terminal event (its
    exact usage) and settles from it; without one (the job was still queued) it
    settles what was relayed (``tokens_seen`` completion tokens) as cancelled.
    """
    try:
        await sync_to_async(generation_cancel)(job_id=generation.job_id)
        deadline = time.monotonic() + settings.API_CANCEL_SETTLE_WAIT_S
        while time.monotonic() < deadline:
            events = await inference_client.agen_read(
                job_id=generation.job_id, after=after, block_ms=200
            )
            if events:
                after = events[-1].id
            if any(e.is_terminal for e in events):
                settlement = await asettle_retrying(generation, recorder, None)
                if settlement.state != "retried":
                    return
                after = protocol.STREAM_START
        cancelled = Outcome(
            status=UsageRecord.Status.CANCELLED,
            finish_reason=protocol.FINISH_CANCELLED,
            usage=protocol.Usage(completion_tokens=tokens_seen),
            model=generation.model,
        )
        await db_brief(outcome_settle)(
            generation=generation, outcome=cancelled, recorder=recorder
        )
    except BACKEND_ERRORS:
        logger.exception("could not settle abandoned generation %s", generation.job_id)
