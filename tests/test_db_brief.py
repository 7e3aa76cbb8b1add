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

from chatsite.db import brief_gate, db_brief, request_thread_release

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
        # as under ASGI: each request's sync steps run in a thread of its own, which
        # a stream gives back before it waits for its answer's end
        async with ThreadSensitiveContext():
            await request_thread_release()
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


async def test_a_request_holding_its_own_connection_never_waits_on_the_gate(settings):
    """The deadlock of 300 readers of one answer: every pooled connection held by a
    request whose middleware read the user and whose view's step then waited on the
    gate, while the gated steps (output moderation, settlements) waited on the pool.
    A request still on its own thread runs its step with the gate fully taken; a
    released one waits for a slot."""
    settings.DATABASE_BRIEF_CONCURRENCY = 1
    gate = brief_gate()
    await gate.acquire()  # every slot held, as by steps waiting on the pool
    try:
        async with ThreadSensitiveContext():
            own = db_brief(get_user_model().objects.count)()
            # ran on the request's own thread, past the full gate
            assert await asyncio.wait_for(own, timeout=10) == 0

            await request_thread_release()
            waiting = asyncio.ensure_future(db_brief(get_user_model().objects.count)())
            done, _ = await asyncio.wait({waiting}, timeout=0.3)
            assert not done  # a released request's step waits its turn
            gate.release()
            assert await asyncio.wait_for(waiting, timeout=10) == 0
    finally:
        if gate.locked():
            gate.release()
