"""The site's sync chain runs on kept threads (chatsite/request_threads.py ``RequestThread``,
leased by chatsite/asgi.py's ``SyncChainASGIHandler``): no thread is started per
request, and a thread goes back only once the work queued on it has run."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
from asgiref.sync import SyncToAsync, ThreadSensitiveContext
from django.http import HttpResponse, StreamingHttpResponse

from chatsite import asgi, db, request_threads
from tests.asgi_get import asgi_get


@pytest.fixture(autouse=True)
def no_idle_threads(monkeypatch):
    """Each test starts with no kept thread idle: threads the suite's earlier requests
    gave back would be leased first, or fill the idle list."""
    monkeypatch.setattr(request_threads, "_idle_threads", [])


def _wait_for(condition: Any, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.005)


def _idle_idents() -> set[int | None]:
    return {t.ident for kept in request_threads._idle_threads for t in kept._threads}


def test_consecutive_requests_run_their_chain_on_the_same_kept_thread(monkeypatch):
    """Two requests one after the other: the second's chain and its response's close
    run on the first's thread, and no thread is started for it."""
    chains: list[int] = []

    def chain(request: Any) -> HttpResponse:
        chains.append(threading.get_ident())
        return HttpResponse("ok")

    monkeypatch.setattr(asgi.sync_site_app, "get_response", chain)
    assert asyncio.run(asgi_get(asgi.sync_site_app, "/login/")) == 200
    _wait_for(
        lambda: len(request_threads._idle_threads) > 0
    )  # given back once its close ran
    started = threading.active_count()
    assert asyncio.run(asgi_get(asgi.sync_site_app, "/login/")) == 200
    assert chains[0] == chains[1] != threading.get_ident()
    assert threading.active_count() == started


def test_a_streamed_response_gives_its_thread_back_when_its_chain_ends(monkeypatch):
    """The chat's streamed POST: once the chain returned the stream, its thread is
    idle again while the stream is still open (waiting costs no thread)."""
    chains: list[int] = []
    idle_during_stream: list[bool] = []

    async def frames():
        await db.request_thread_release()  # as the chat's relay does at its start
        for _ in range(1000):
            if chains[0] in _idle_idents():
                break
            await asyncio.sleep(0.005)
        idle_during_stream.append(chains[0] in _idle_idents())
        yield "data: 1\n\n"

    def chain(request: Any) -> StreamingHttpResponse:
        chains.append(threading.get_ident())
        return StreamingHttpResponse(frames(), content_type="text/event-stream")

    monkeypatch.setattr(asgi.sync_site_app, "get_response", chain)
    assert asyncio.run(asgi_get(asgi.sync_site_app, "/login/")) == 200
    assert idle_during_stream == [True]


def test_a_thread_still_running_an_abandoned_call_is_not_leased_again():
    """A thread given back while a call queued on it still runs (a chain whose client
    left) becomes idle only after that call: the next request gets another thread."""
    go = threading.Event()

    async def scenario() -> tuple[Any, Any]:
        async with ThreadSensitiveContext():
            first = request_threads.request_thread_lease()
            assert first is not None
            blocked = asyncio.ensure_future(SyncToAsync(go.wait)(30))
            await asyncio.sleep(0.05)
            request_threads.request_thread_return(first)
            request_threads.request_thread_return(first)  # idempotent
        async with ThreadSensitiveContext():
            second = request_threads.request_thread_lease()
            assert second is not None
            request_threads.request_thread_return(second)
        go.set()
        await blocked
        return first, second

    first, second = asyncio.run(scenario())
    assert first is not second
    _wait_for(lambda: first in request_threads._idle_threads)
    assert request_threads._idle_threads.count(first) == 1
