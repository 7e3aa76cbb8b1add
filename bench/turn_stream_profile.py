"""Where a streamed chat turn's CPU goes in the web process, from the POST to its first
token frame (``bench/turn_overhead.py --stream-profile N``).

In this process, on one event loop kept for every turn (uvloop when installed, as the
web process runs): the chat page's message POST (``Accept: text/event-stream``)
through ``chatsite.asgi.application`` up to the first ``token`` frame it sends, and
the same POST answered with the turn's JSON (``Accept: application/json``) to its
end (the response closed, its thread gone). A scripted worker runs as a process: the
first token at once, the rest 1 s later (``--rest-delay-ms``), so the answer's end
and settlement fall outside the window; each streamed turn is read to its ``done``
frame before the next one.

Per turn (medians over the turns after the first ``warm``): the CPU of this process
(``time.process_time``: the loop's thread, the request's sync thread and any other;
PostgreSQL, Redis and the worker are other processes) over the window; the loop
thread's own (``time.thread_time``); the sync chain's (``SyncChainASGIHandler.
_respond`` in the request's thread). With ``profile``: cProfile (CPU clock) of the
loop thread over the streamed window and of the sync chain, each summarised by
cumulative and own time. The in-process client (building the scope, parsing frames)
is in the loop's figures; it is small beside the request.
"""

from __future__ import annotations

import asyncio
import cProfile
import io
import os
import pstats
import statistics
import threading
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

REST_MS = 1000  # the answer's rest and end this long after its first token


class Meter:
    """CPU marks of one request: process and loop thread at its start, at its first
    token frame (``token``) and at its end (``end``), ms."""

    def __init__(self) -> None:
        self.process0 = time.process_time()
        self.thread0 = time.thread_time()
        self.marks: dict[str, tuple[float, float]] = {}

    def mark(self, name: str) -> None:
        if name not in self.marks:
            self.marks[name] = (
                (time.process_time() - self.process0) * 1000,
                (time.thread_time() - self.thread0) * 1000,
            )


class ChainMeter:
    """The sync chain's CPU (``_respond``, in the request's thread), ms per call, and
    its cProfile when ``profiler`` is set."""

    def __init__(self) -> None:
        self.calls: list[float] = []
        self.profiler: cProfile.Profile | None = None
        self.lock = threading.Lock()

    def install(self) -> None:
        from chatsite.asgi import SyncChainASGIHandler

        original = SyncChainASGIHandler._respond
        meter = self

        def respond(handler: Any, request: Any) -> Any:
            profiler = meter.profiler
            started = time.thread_time()
            if profiler is not None:
                profiler.enable()
            try:
                return original(handler, request)
            finally:
                if profiler is not None:
                    profiler.disable()
                with meter.lock:
                    meter.calls.append((time.thread_time() - started) * 1000)

        SyncChainASGIHandler._respond = respond  # type: ignore[method-assign]


def _scope(cookie: str, csrf: str, accept: str, body: bytes) -> dict[str, Any]:
    headers = [
        (b"host", b"testserver"),
        (b"accept", accept.encode()),
        (b"cookie", cookie.encode()),
        (b"x-csrftoken", csrf.encode()),
        (b"content-type", b"application/x-www-form-urlencoded"),
        (b"content-length", str(len(body)).encode()),
    ]
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/c/messages/",
        "raw_path": b"/c/messages/",
        "query_string": b"",
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 50000),
        "server": ("testserver", 80),
    }


async def post(
    cookie: str,
    csrf: str,
    body: bytes,
    *,
    stream: bool,
    on_token: Callable[[], None] | None = None,
) -> tuple[Meter, int, bytes]:
    """One message POST through the ASGI app; return its meter (``token``: the first
    token frame sent; ``end``: the response ended), status and body."""
    from chatsite.asgi import application

    accept = "text/event-stream, application/json" if stream else "application/json"
    scope = _scope(cookie, csrf, accept, body)
    ended = asyncio.Event()
    sent = False
    status, chunks = 0, bytearray()
    meter = Meter()

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await ended.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
            return
        chunk = message.get("body", b"")
        chunks.extend(chunk)
        if b"event: token" in chunk and "token" not in meter.marks:
            meter.mark("token")
            if on_token is not None:
                on_token()
        if b"event: done" in chunk or b"event: error" in chunk:
            ended.set()
        if not message.get("more_body", False):
            ended.set()

    await application(scope, receive, send)
    meter.mark("end")
    return meter, status, bytes(chunks)


def _summary(title: str, prof: cProfile.Profile, rows: int = 45) -> None:
    for order, label in (("cumulative", "cumulative"), ("tottime", "own time")):
        out = io.StringIO()
        pstats.Stats(prof, stream=out).sort_stats(order).print_stats(rows)
        print(f"\ncProfile of {title} ({label}, CPU time):")
        print("\n".join(out.getvalue().splitlines()[: rows + 12]))


def stream_profile_run(turns: int) -> None:
    """Run ``turns`` streamed turns and ``turns`` JSON POSTs in this process; print the
    CPU split and the profiles (module docstring)."""
    from django.conf import settings

    from bench.cpu_pin import (
        load_note,
        load_pin,
        load_pin_services,
        pinning_plan,
        web_pin,
    )
    from bench.turn_overhead import CHAT_WORKER, QUESTION, session_for, users_setup
    from bench.turn_profile import in_process_settings
    from tests.stack import stack_env, worker_processes

    in_process_settings(moderation=False)
    env = stack_env({"LOG_LEVEL": "WARNING"}, for_tests=False)
    worker = [*CHAT_WORKER, "--rest-delay-ms", str(REST_MS)]
    plan = pinning_plan()
    load_pin(plan)
    try:
        import uvloop

        loop = uvloop.new_event_loop()
    except ImportError:
        loop = asyncio.new_event_loop()
    chain = ChainMeter()
    with worker_processes([worker], env):
        web_pin(plan, os.getpid())
        load_pin_services(plan)
        print(f"pinning: {plan.describe()} (the web process: this one); {load_note()}")
        user = users_setup(1, memory=False)[0]
        session = session_for(user)
        cookie = session.header
        csrf = session.cookies[settings.CSRF_COOKIE_NAME]
        body = f"content={quote(QUESTION)}".encode()
        import chatsite.asgi  # noqa: F401  the web process's imports and warm-up

        chain.install()
        loop_prof = cProfile.Profile(time.thread_time)
        chain_prof = cProfile.Profile(time.thread_time)
        rows: dict[str, list[float]] = {
            k: []
            for k in (
                "stream process",
                "stream loop",
                "stream chain",
                "json process",
                "json loop",
                "json chain",
            )
        }
        warm = 3
        for i in range(turns + warm):
            profiled = i >= warm and i % 2 == 1  # every other warm turn: unprofiled
            chain.profiler = chain_prof if profiled else None
            if profiled:
                loop_prof.enable()
            meter, status, raw = loop.run_until_complete(
                post(
                    cookie,
                    csrf,
                    body,
                    stream=True,
                    on_token=loop_prof.disable if profiled else None,
                )
            )
            loop_prof.disable()
            chain.profiler = None
            assert status == 201, raw[:300]
            if i >= warm and not profiled:
                rows["stream process"].append(meter.marks["token"][0])
                rows["stream loop"].append(meter.marks["token"][1])
                rows["stream chain"].append(chain.calls[-1])
            meter, status, raw = loop.run_until_complete(
                post(cookie, csrf, body, stream=False)
            )
            assert status == 201, raw[:300]
            if i >= warm and not profiled:
                rows["json process"].append(meter.marks["end"][0])
                rows["json loop"].append(meter.marks["end"][1])
                rows["json chain"].append(chain.calls[-1])
            time.sleep(REST_MS / 1000 + 0.2)  # the JSON POST's answer ends unread
    med = statistics.median
    n = len(rows["stream process"])
    print(f"\nCPU per request, ms (medians of {n} unprofiled turns); {load_note()}")
    for kind in ("stream", "json"):
        window = "POST -> first token frame" if kind == "stream" else "POST -> end"
        print(
            f"  {kind:6s} ({window}): process {med(rows[kind + ' process']):6.2f}"
            f"  loop thread {med(rows[kind + ' loop']):6.2f}"
            f"  sync chain {med(rows[kind + ' chain']):6.2f}"
        )
    if os.environ.get("TURN_PROFILE_OUT"):
        loop_prof.dump_stats(os.environ["TURN_PROFILE_OUT"] + ".loop")
        chain_prof.dump_stats(os.environ["TURN_PROFILE_OUT"] + ".chain")
    _summary("the loop thread, streamed POST to its first token frame", loop_prof)
    _summary("the sync chain of the streamed POSTs", chain_prof)
