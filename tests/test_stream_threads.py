"""Streaming responses hold no thread while they wait (chatsite/db.py): a request
gives its own thread back, and its later brief steps share the process's threads,
in batches when they come in a burst."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from asgiref.sync import ThreadSensitiveContext, sync_to_async
from django.contrib.auth import get_user_model
from django.db import connection

from chatsite import db, db_batch
from chatsite.db import db_brief, request_thread_release
from chatsite.db_batch import db_batched, db_bulk

pytestmark = pytest.mark.django_db(transaction=True)


async def _until(condition, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


async def test_a_request_that_gave_its_thread_back_waits_without_one():
    """As under ASGI: the request's sync steps ran in a thread of its own; once it gave
    it back that thread ends, and its next steps run on the shared threads."""
    async with ThreadSensitiveContext():
        own = await db_brief(threading.current_thread)()
        assert own.is_alive()

        await request_thread_release()
        await request_thread_release()  # idempotent

        await _until(lambda: not own.is_alive())
        name = await db_brief(lambda: threading.current_thread().name)()
        assert name.startswith("stream-sync")
        assert await db_brief(get_user_model().objects.exists)() is False


async def test_the_end_of_a_request_that_gave_its_thread_back_starts_none(
    monkeypatch,
):
    """A streamed request's end (asgiref's context exit) starts no thread to shut
    down the shared threads it used."""
    context = ThreadSensitiveContext()
    async with context:
        await request_thread_release()
        assert await db_brief(get_user_model().objects.count)() == 0
        started: list[threading.Thread] = []
        start = threading.Thread.start

        def counted(thread: threading.Thread) -> None:
            started.append(thread)
            start(thread)

        monkeypatch.setattr(threading.Thread, "start", counted)
    assert started == []
    assert await db_brief(get_user_model().objects.count)() == 0  # still serves


@pytest.mark.parametrize("released_by_the_view", [True, False])
async def test_a_connection_the_view_gave_back_needs_no_hop_to_release(
    monkeypatch, released_by_the_view
):
    """The sync chain's streamed response (chatsite.asgi): its thread's connection
    goes back to the pool in the view's own hop, so giving the thread back makes no
    further hop to it; without that it makes one. Either way the thread ends."""

    def view() -> threading.Thread:
        get_user_model().objects.exists()  # the view used its connection
        if released_by_the_view:
            db.request_connection_release()
            assert connection.connection is None
        return threading.current_thread()

    hops: list[str] = []

    def counted(fn):
        hops.append(fn.__name__)
        return sync_to_async(fn)

    async with ThreadSensitiveContext():
        own = await sync_to_async(view)()
        monkeypatch.setattr(db, "sync_to_async", counted)
        await request_thread_release()
        assert hops == ([] if released_by_the_view else ["connection_return"])
        await _until(lambda: not own.is_alive())
        assert await db_brief(get_user_model().objects.exists)() is False


async def test_steps_of_many_streams_run_in_batches_and_fail_alone(monkeypatch):
    """Twenty answers ending together: their steps share thread hand-offs (a batch
    per hand-off), each gets its own result, and one that raises fails alone."""
    hand_offs = 0
    run_calls = db_batch._run_calls

    def counted(fn, calls):
        nonlocal hand_offs
        hand_offs += 1
        return run_calls(fn, calls)

    monkeypatch.setattr(db_batch, "_run_calls", counted)

    def step(i: int) -> tuple[int, int]:
        time.sleep(0.05)  # the step's round trips
        if i == 3:
            raise ValueError("three")
        return i, get_user_model().objects.count()

    batched = db_batched(step)

    async def stream(i: int) -> tuple[int, int]:
        async with ThreadSensitiveContext():
            await request_thread_release()
            return await batched(i)

    got = await asyncio.gather(*(stream(i) for i in range(20)), return_exceptions=True)

    assert isinstance(got[3], ValueError)
    assert [g for k, g in enumerate(got) if k != 3] == [
        (i, 0) for i in range(20) if i != 3
    ]
    assert 1 <= hand_offs <= 8


async def test_outside_a_request_a_batched_step_is_a_brief_one():
    """No ASGI request (a test, a management command): each call runs as db_brief's."""
    batched = db_batched(lambda: threading.current_thread().name)
    assert not (await batched()).startswith("stream-sync")


async def _released_calls(step, n: int) -> list:
    async def stream(i: int):
        async with ThreadSensitiveContext():
            await request_thread_release()
            return await step(i)

    return await asyncio.gather(*(stream(i) for i in range(n)), return_exceptions=True)


async def test_a_bulk_step_answers_each_call_of_its_batch():
    """db_bulk: one bulk call per batch answers each call, in order; an answer that
    is an exception fails its own call only."""
    batches: list[list[int]] = []

    def bulk(calls):
        batches.append([args[0] for _context, args, _kwargs in calls])
        return [
            (False, ValueError("three")) if args[0] == 3 else (True, args[0] * 10)
            for _context, args, _kwargs in calls
        ]

    got = await _released_calls(db_bulk(bulk, lambda i: -1), 12)

    assert isinstance(got[3], ValueError)
    assert [g for k, g in enumerate(got) if k != 3] == [
        i * 10 for i in range(12) if i != 3
    ]
    assert sorted(i for batch in batches for i in batch) == list(range(12))


async def test_when_a_bulk_step_raises_each_call_of_its_batch_runs_alone():
    def bulk(calls):
        raise RuntimeError("the batch's transaction failed")

    def alone(i: int) -> int:
        if i == 5:
            raise ValueError("five")
        return i + get_user_model().objects.count()

    got = await _released_calls(db_bulk(bulk, alone), 8)

    assert isinstance(got[5], ValueError)
    assert [g for k, g in enumerate(got) if k != 5] == [i for i in range(8) if i != 5]
