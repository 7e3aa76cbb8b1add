"""Brief database steps of async views (chatsite/db.py): connections go back to the
pool after each, and a burst of them is gated per event loop."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from asgiref.sync import ThreadSensitiveContext
from django.contrib.auth import get_user_model
from django.db import connection

from chatsite.db import db_brief

pytestmark = pytest.mark.django_db(transaction=True)


async def test_a_burst_of_brief_steps_runs_at_most_the_configured_number_at_once(
    settings,
):
    """Fifty answers settling together: at most DATABASE_BRIEF_CONCURRENCY steps run
    in threads at once (each queries), the rest wait on the event loop; all finish."""
    settings.DATABASE_BRIEF_CONCURRENCY = 3
    running, peak = 0, 0
    lock = threading.Lock()

    def step(i: int) -> int:
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
        try:
            time.sleep(0.01)  # the step's round trips
            return get_user_model().objects.count() + i
        finally:
            with lock:
                running -= 1

    async def request(i: int) -> int:
        # as under ASGI: each request's sync steps run in a thread of its own
        async with ThreadSensitiveContext():
            return await db_brief(step)(i)

    got = await asyncio.gather(*(request(i) for i in range(50)))

    assert got == list(range(50))
    assert peak == 3


async def test_after_a_brief_step_the_connection_is_back_in_the_pool():
    def step() -> bool:
        get_user_model().objects.exists()
        return connection.connection is not None

    assert await db_brief(step)() is True  # held while querying
    assert await db_brief(lambda: connection.connection is None)() is True
