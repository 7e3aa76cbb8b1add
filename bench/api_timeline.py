"""Where an API request's admission time goes: an in-process timeline, boundary by
boundary, of ``POST /v1/chat/completions`` (streamed) up to its response head.

    .venv/bin/python bench/api_timeline.py [--requests 300] [--warm 30] [--gap-ms 20]

In this process, on one uvloop kept for every request, as the web process runs: the
request goes through ``chatsite.asgi.application`` with a fresh API key of a bench user
on an unlimited plan, the same body as bench/gateway_overhead.py (one user message,
``stream: true``), and is read to its end before the next one (``--gap-ms`` later). A
scripted worker (no delay) runs as a process. Pinned as bench/cpu_pin.py pins: this
process on the first core, the worker, PostgreSQL and Redis on the others.

Each boundary (the ASGI call, Django's handler, the ``request_started`` hop, the view,
the ``db_quick`` hop, the step's parts, each Redis round trip, the loop again, the
response head) is marked with ``time.perf_counter`` and the marking thread's
``time.thread_time``; the functions are wrapped here, nothing in the project changes.
Printed: per segment between two consecutive marks, the median wall time and, when
both marks are on the same thread, the median CPU time of that thread (ms), over the
requests after ``--warm``; then the totals: call -> response head (wall, and this
process's CPU by ``time.process_time``) and the step's own CPU. ``--profile``: also
cProfile (CPU clock) of the loop thread from Django's handler to the view's hop
(its figures then include the profiler's own cost).
"""

from __future__ import annotations

import asyncio
import cProfile
import functools
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("LOG_LEVEL", "WARNING")

import chatsite.blas_threads  # noqa: E402, F401  as the web process: before numpy
from bench.boot import django_start, option_parser  # noqa: E402

Mark = tuple[str, float, float, str]  # name, wall s, thread CPU s, thread name
_marks: list[Mark] = []


def mark(name: str) -> None:
    """Record boundary ``name`` of the request being measured."""
    _marks.append(
        (name, time.perf_counter(), time.thread_time(), threading.current_thread().name)
    )


def wrap(owner: Any, attr: str, name: str) -> None:
    """Mark ``name>`` before and ``name<`` after every call of ``owner.attr``."""
    original = getattr(owner, attr)

    @functools.wraps(original)
    def marked(*args: Any, **kwargs: Any) -> Any:
        mark(name + ">")
        try:
            return original(*args, **kwargs)
        finally:
            mark(name + "<")

    setattr(owner, attr, marked)


_profiler: list[cProfile.Profile] = []  # with --profile: the loop's, call -> hop


def instrument() -> None:
    """Wrap the boundaries of the API's admission path (module docstring)."""
    import redis.client
    from django.core import signals

    import chatsite.asgi
    from conversations.openai import stream, views
    from gateway import quota, selectors
    from gateway.generations import admission, start
    from inference import affinity

    handler = chatsite.asgi.ApiASGIHandler
    handle = handler.handle

    async def handle_marked(self: Any, scope: Any, receive: Any, send: Any) -> None:
        mark("handler")
        if _profiler:
            _profiler[0].enable()
        await handle(self, scope, receive, send)

    handler.handle = handle_marked  # type: ignore[method-assign]
    sent = signals.request_started.asend

    async def asend_marked(*args: Any, **kwargs: Any) -> Any:
        mark("request_started>")
        try:
            return await sent(*args, **kwargs)
        finally:
            mark("request_started<")

    signals.request_started.asend = asend_marked  # type: ignore[method-assign]
    signals.request_started.connect(
        lambda **kwargs: mark("request_started sent"), weak=False
    )
    quick = views.db_quick

    def quick_marked(fn: Any) -> Any:
        if _profiler:
            _profiler[0].disable()
        mark("view: hop submit")
        return quick(fn)

    views.db_quick = quick_marked
    wrap(views, "_authenticate_and_start", "step")
    wrap(views.gateway, "api_key_authenticate", "auth")
    wrap(views, "completion_request_parse", "parse")
    wrap(stream, "_model_check", "model check")
    wrap(stream, "prompt_tokens_count", "tokenize")
    wrap(start, "generation_admit", "admit")
    wrap(admission, "input_check", "input check")
    wrap(selectors, "plan_for_user", "plan")
    wrap(quota, "quota_reserve", "reserve")
    wrap(start, "generation_submit", "submit")
    wrap(affinity, "job_route", "route")
    wrap(redis.client.Pipeline, "execute", "redis RT")
    wrap(views, "tools_forced", "loop: back")


def _scope(key: str, body: bytes) -> dict[str, Any]:
    headers = [
        (b"host", b"testserver"),
        (b"authorization", f"Bearer {key}".encode()),
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
    ]
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/v1/chat/completions",
        "raw_path": b"/v1/chat/completions",
        "query_string": b"",
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 50000),
        "server": ("testserver", 80),
    }


async def request(key: str, body: bytes) -> tuple[int, bytes, float, float]:
    """One streamed completion through the ASGI app, read to its end; return its
    status, body, and this process's CPU (s) and wall (s) to the response head."""
    from chatsite.asgi import application

    scope = _scope(key, body)
    ended = asyncio.Event()
    sent = False
    status, chunks = 0, bytearray()
    cpu0 = time.process_time()
    head: list[float] = []

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
            mark("response head")
            head.append(time.process_time() - cpu0)
            status = message["status"]
            return
        chunks.extend(message.get("body", b""))
        if not message.get("more_body", False):
            ended.set()

    mark("call")
    await application(scope, receive, send)
    return status, bytes(chunks), head[0] if head else float("nan"), 0.0


def _pin_services(cores: frozenset[int]) -> None:
    """Pin this worktree's services (either profile: PostgreSQL, Redis) to ``cores``."""
    from bench.cpu_pin import _children, _pidfile, pid_pin
    from chatsite.settings.environment import SERVICES_DIR

    postmaster = _pidfile(SERVICES_DIR / "pg" / "data" / "postmaster.pid")
    pids = [postmaster, *_children(postmaster)] if postmaster else []
    port = (SERVICES_DIR / "redis" / "port").read_text().strip()
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if "redis-server" in cmd and f":{port}" in cmd:
            pids.append(int(proc.name))
    for pid in pids:
        pid_pin(pid, cores)


def main() -> None:
    parser = option_parser(__doc__, requests=300, warm=30, gap_ms=20)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    django_start()
    from django.conf import settings

    from bench.cpu_pin import load_note, load_pin, pinning_plan, web_pin
    from bench.turn_overhead import CHAT_WORKER, users_setup
    from bench.turn_profile import in_process_settings
    from gateway import services
    from tests.stack import stack_env, worker_processes

    in_process_settings(moderation=False)
    env = stack_env({"LOG_LEVEL": "WARNING"}, for_tests=False)
    plan = pinning_plan()
    load_pin(plan)
    import uvloop

    loop = uvloop.new_event_loop()
    user = users_setup(1, memory=False)[0]
    key = services.api_key_create(user=user, name="timeline")[1]
    body = json.dumps(
        {
            "model": "turn-bench",
            "messages": [{"role": "user", "content": "Say the fixed answer."}],
            "stream": True,
            "max_tokens": 256,
        }
    ).encode()
    with worker_processes([CHAT_WORKER], env):
        import chatsite.asgi  # noqa: F401  the web process's imports and warm-up

        web_pin(plan, os.getpid())
        _pin_services(plan.load)
        note = f"pinning: {plan.describe()} (web: this process); {load_note()}"
        print(note, f"tokenizer {settings.MEMORY_TOKENIZER_ENGINE}", flush=True)
        instrument()
        if args.profile:
            _profiler.append(cProfile.Profile(time.thread_time))
        runs: list[list[Mark]] = []
        heads_cpu: list[float] = []
        for i in range(args.requests + args.warm):
            _marks.clear()
            status, raw, cpu, _ = loop.run_until_complete(request(key, body))
            assert status == 200 and b"[DONE]" in raw, raw[:300]
            if i >= args.warm:
                runs.append(list(_marks))
                heads_cpu.append(cpu * 1000)
            time.sleep(args.gap_ms / 1000)
    _report(runs, heads_cpu)
    print(load_note())
    if _profiler:
        import pstats

        stats = pstats.Stats(_profiler[0]).sort_stats("tottime")
        stats.print_stats(40)


def _report(runs: list[list[Mark]], heads_cpu: list[float]) -> None:
    med = statistics.median
    segments: dict[str, list[tuple[float, float | None]]] = {}
    order: list[str] = []
    for marks in runs:
        head = next(i for i, m in enumerate(marks) if m[0] == "response head")
        for a, b in zip(marks[:head], marks[1 : head + 1], strict=True):
            label = f"{a[0]} -> {b[0]}"
            cpu = (b[2] - a[2]) * 1000 if a[3] == b[3] else None
            if label not in segments:
                segments[label] = []
                order.append(label)
            segments[label].append(((b[1] - a[1]) * 1000, cpu))
    print(f"\n{len(runs)} requests; per segment, medians (ms): wall, CPU (same thread)")
    for label in order:
        rows = segments[label]
        walls = [w for w, _ in rows]
        cpus = [c for _, c in rows if c is not None]
        cpu = f"{med(cpus):6.3f}" if cpus else "   -  "
        print(f"  {med(walls):6.3f} {cpu}  n={len(rows):4d}  {label}")
    totals = []
    steps = []
    for marks in runs:
        at = {m[0]: m for m in marks}
        totals.append((at["response head"][1] - at["call"][1]) * 1000)
        steps.append((at["step<"][2] - at["step>"][2]) * 1000)
    print(f"call -> response head: wall p50 {med(totals):.3f} ms")
    print(f"  process CPU to the head p50 {med(heads_cpu):.3f} ms")
    print(f"  step thread CPU p50 {med(steps):.3f} ms")


if __name__ == "__main__":
    main()
