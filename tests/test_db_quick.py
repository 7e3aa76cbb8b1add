"""Quick database steps of async views (chatsite/db.py ``db_quick``): reused threads,
the caller's context, connections back to the pool after each."""

from __future__ import annotations

import asyncio
import contextvars
import threading

import pytest
from asgiref.sync import ThreadSensitiveContext
from django.contrib.auth import get_user_model
from django.db import connection

from chatsite.db import db_quick

pytestmark = pytest.mark.django_db(transaction=True)

_asker: contextvars.ContextVar[str] = contextvars.ContextVar("asker", default="")


async def test_a_burst_of_quick_steps_reuses_a_few_threads(settings):
    """Fifty API requests admitted together: every step runs, on at most
    DATABASE_QUICK_THREADS threads (none started per request), each sees its own
    request's context and queries the database."""
    threads: set[int] = set()

    def step(i: int) -> tuple[int, str]:
        threads.add(threading.get_ident())
        get_user_model().objects.exists()
        return i, _asker.get()

    async def request(i: int) -> tuple[int, str]:
        async with ThreadSensitiveContext():  # as under ASGI
            _asker.set(f"request {i}")
            return await db_quick(step)(i)

    got = await asyncio.gather(*(request(i) for i in range(50)))

    assert got == [(i, f"request {i}") for i in range(50)]
    assert 1 <= len(threads) <= settings.DATABASE_QUICK_THREADS
    assert threading.get_ident() not in threads


async def test_after_a_quick_step_the_connection_is_back_in_the_pool():
    def step() -> bool:
        get_user_model().objects.exists()
        return connection.connection is not None

    assert await db_quick(step)() is True  # held while querying
    assert await db_quick(lambda: connection.connection is None)() is True


async def test_a_quick_step_is_queued_when_called_before_the_loop_runs_again():
    """The step goes to its thread as the view calls it, not a loop iteration later
    (no task of its own): it runs while the loop is still inside the caller."""
    started = threading.Event()

    def step() -> int:
        started.set()
        return 7

    pending = db_quick(step)()
    # the loop does not run while this coroutine blocks: only the call queued it
    assert started.wait(timeout=5)
    assert isinstance(pending, asyncio.Future)
    assert await asyncio.shield(pending) == 7
