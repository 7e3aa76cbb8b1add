"""The API's admission under a burst: ``--concurrency`` streamed completions sent at
once through the web process's ASGI app, in process, round after round.

    .venv/bin/python bench/api_burst.py [--concurrency 50] [--rounds 8] [--warm 1]

As bench/api_timeline.py runs the web side (one uvloop, ``chatsite.asgi.application``,
a fresh API key of a bench user on an unlimited plan, a scripted worker with no delay
as a process, input moderation off), but every round starts ``--concurrency``
requests at once, as bench/gateway_overhead.py's client does, and reads them all to
their end; the next round starts ``--gap-ms`` later. No HTTP: the figures are the
web process's own, without a client, an upstream or uvicorn on its core.

Per request, from the round's start (ms): ``head``, the response head (the job is
queued: the view answers only after its enqueue's round trip returned);
``admitted``, the job's ``enqueued_at`` (the end of the admission step's reservation,
as bench/overhead_levels.py's ``admission`` stage reads it); ``first``, the first
content chunk. Printed: p50 and p99 of each over the rounds after ``--warm``, this
process's CPU per request, and the load average.
Pinned as bench/cpu_pin.py pins: this process on the first core, the worker,
PostgreSQL and Redis on the others.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("LOG_LEVEL", "WARNING")

import chatsite.blas_threads  # noqa: E402, F401  as the web process: before numpy
from bench.boot import django_start, option_parser  # noqa: E402
from bench.record import pct  # noqa: E402


def request_scope(key: str, body: bytes) -> dict[str, Any]:
    """The ASGI scope of ``POST /v1/chat/completions`` with ``key`` and ``body``."""
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


async def one(key: str, body: bytes, t0: float) -> tuple[float, float, float, str]:
    """One streamed completion read to its end; return its head and first content
    chunk (s after ``t0``, perf_counter), its wall-clock start (epoch s) and id."""
    from chatsite.asgi import application

    ended = asyncio.Event()
    sent = False
    head = first = float("nan")
    status, raw = 0, bytearray()
    epoch0 = time.time() - (time.perf_counter() - t0)

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await ended.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status, head, first
        if message["type"] == "http.response.start":
            head = time.perf_counter() - t0
            status = message["status"]
            return
        piece = message.get("body", b"")
        if first != first and b'"content"' in piece:  # NaN: not yet
            first = time.perf_counter() - t0
        raw.extend(piece)
        if not message.get("more_body", False):
            ended.set()

    await application(request_scope(key, body), receive, send)
    assert status == 200 and b"[DONE]" in raw, bytes(raw[:300])
    cid = json.loads(bytes(raw).split(b"data: ", 2)[1].split(b"\n", 1)[0])["id"]
    return head, first, epoch0, cid


def main() -> None:
    parser = option_parser(__doc__, requests=0, warm=1, gap_ms=200)
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument(
        "--switch-ms",
        type=float,
        default=0.0,
        help="sys.setswitchinterval for this process, ms (0: Python's default, 5)",
    )
    args = parser.parse_args()
    if args.switch_ms:
        sys.setswitchinterval(args.switch_ms / 1000)
    django_start()
    from bench.cpu_pin import load_note, load_pin, pinning_plan, web_pin
    from bench.turn_overhead import CHAT_WORKER, users_setup
    from bench.turn_profile import in_process_settings
    from gateway import services
    from inference import keys
    from inference.connections import redis_sync
    from tests.stack import stack_env, worker_processes

    in_process_settings(moderation=False)
    env = stack_env({"LOG_LEVEL": "WARNING"}, for_tests=False)
    plan = pinning_plan()
    load_pin(plan)
    import uvloop

    loop = uvloop.new_event_loop()
    user = users_setup(1, memory=False)[0]
    key = services.api_key_create(user=user, name="burst")[1]
    body = json.dumps(
        {
            "model": "turn-bench",
            "messages": [{"role": "user", "content": "Say the fixed answer."}],
            "stream": True,
            "max_tokens": 256,
        }
    ).encode()
    heads: list[float] = []
    firsts: list[float] = []
    admitted: list[float] = []
    cpu = 0.0
    with worker_processes([CHAT_WORKER], env):
        import chatsite.asgi  # noqa: F401  the web process's imports and warm-up

        web_pin(plan, os.getpid())
        load_pin(plan)  # the services again: pinned before they had all started
        print(f"pinning: {plan.describe()} (web: this process); {load_note()}")

        async def burst() -> list[tuple[float, float, float, str]]:
            t0 = time.perf_counter()
            calls = [one(key, body, t0) for _ in range(args.concurrency)]
            return await asyncio.gather(*calls)

        for i in range(args.rounds + args.warm):
            cpu0 = time.process_time()
            rows = loop.run_until_complete(burst())
            if i >= args.warm:
                cpu += time.process_time() - cpu0
                for head, first, epoch0, cid in rows:
                    heads.append(head * 1000)
                    firsts.append(first * 1000)
                    job_id = str(uuid.UUID(cid.removeprefix("chatcmpl-")))
                    raw = redis_sync().get(keys.job_key(job_id))
                    if raw is not None:
                        enqueued = float(json.loads(raw)["enqueued_at"])
                        admitted.append((enqueued - epoch0) * 1000)
            time.sleep(args.gap_ms / 1000)
    n = len(heads)
    print(
        f"c={args.concurrency}, {args.rounds} rounds, {n} requests, GIL switch "
        f"interval {sys.getswitchinterval() * 1000:g} ms; ms from the round's start, "
        "p50 / p99"
    )
    for name, values in (("admitted", admitted), ("head", heads), ("first", firsts)):
        print(f"  {name:9s} {pct(values, 50):8.2f} {pct(values, 99):8.2f}")
    print(f"  web process CPU per request {cpu * 1000 / max(n, 1):.3f} ms")
    print(load_note())


if __name__ == "__main__":
    main()
