"""A request flood from one user, and what other users' time to first token does.

    .venv/bin/python bench/flood.py [--requests 1000] [--seconds 10] [--turns 10]

Starts the web process (uvicorn, tests/stack.py) and a scripted worker (`run_inference_worker --engine scripted`,
20 ms per token, so the figures measure the web tier, not a model) on the dev services
(run `make migrate` first), signs in a flooder and a bystander over HTTP, then:

1. unloaded: the bystander's client TTFT (POST sent -> first `token` frame) over
   ``--turns`` turns, one at a time;
2. loaded: the same while the flooder sends ``--requests`` message POSTs spread over
   ``--seconds`` seconds (64 at a time at most).

The flooder is a process of its own (this script with ``--flood-client``), so its
client work does not delay the bystander's event loop, and its CPU time is measured
apart: on a 2-core machine the flood client itself takes a share of the cores the web
process needs, which no server-side change can give back.

Prints the flood's status counts (201 accepted up to CHAT_MESSAGE_RATE, 429 with
Retry-After after), whether every 429 carried Retry-After, the bystander's TTFT p50
unloaded and loaded, and their ratio (goal: at most 2x); the CPU (cores
busy) of the web process and of the flood client while the flood ran, and the load
average.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.boot import django_start, option_parser  # noqa: E402
from bench.procstat import proc_cpu_s  # noqa: E402
from bench.record import figures_record  # noqa: E402

POOL = "flood-bench"  # a pool only this run's worker serves


async def _login(base: str, username: str, password: str):
    import httpx

    from bench.chat import login_form

    client = httpx.AsyncClient(base_url=base, timeout=60)
    await client.get("/login/")
    form = login_form(client.cookies, username=username, password=password)
    await client.post("/login/", data=form)
    await client.get("/")
    return client


async def _ttft_ms(client) -> float:
    """One turn of the bystander: ms from POST to its first token frame."""
    from tests.sse import parse_frames

    sent = time.monotonic()
    r = await client.post(
        "/c/messages/",
        data={"content": "How are you?"},
        headers={"X-CSRFToken": client.cookies["csrftoken"]},
    )
    if r.status_code != 201:
        title = r.text.split('exception_value">')[-1].split("</pre>")[0][:300]
        print(f"bystander refused: {r.status_code} {title or r.text[:300]}")
        return float("nan")
    buffer, first = "", None
    url = r.json()["assistant_message"]["stream_url"]
    async with client.stream("GET", url) as stream:
        async for chunk in stream.aiter_text():
            buffer += chunk
            events, _, buffer = parse_frames(buffer)
            for e in events:
                if e.event == "token" and first is None:
                    first = time.monotonic()
            if any(e.event in ("done", "error") for e in events):
                break
    return (first - sent) * 1000 if first else float("nan")


async def _bystander(client, turns: int) -> list[float]:
    return [await _ttft_ms(client) for _ in range(turns)]


async def _flood(
    base: str, cookies: dict[str, str], requests: int, seconds: float
) -> tuple[Counter, bool]:
    import httpx

    statuses: Counter[int] = Counter()
    retry_after = True
    gate = asyncio.Semaphore(64)
    client = httpx.AsyncClient(base_url=base, timeout=60, cookies=cookies)
    token = cookies["csrftoken"]

    async def one(i: int) -> None:
        nonlocal retry_after
        await asyncio.sleep(i * seconds / requests)
        async with gate:
            r = await client.post(
                "/c/messages/",
                data={"content": f"flood {i}"},
                headers={"X-CSRFToken": token, "Accept": "application/json"},
            )
        statuses[r.status_code] += 1
        if r.status_code == 429 and not r.headers.get("Retry-After"):
            retry_after = False

    await asyncio.gather(*(one(i) for i in range(requests)))
    await client.aclose()
    return statuses, retry_after


def flood_client(spec: str) -> None:
    """The flooder's process (``--flood-client JSON``): send the flood, print one JSON
    line with the status counts, Retry-After check and this process's CPU seconds."""
    job = json.loads(spec)
    statuses, retry_after = asyncio.run(
        _flood(job["base"], job["cookies"], job["requests"], job["seconds"])
    )
    print(
        json.dumps(
            {
                "statuses": dict(statuses),
                "retry_after": retry_after,
                "cpu_s": time.process_time(),
            }
        )
    )


async def _flood_process(base: str, client, args) -> dict:
    """Run the flood in a process of its own; return its JSON report."""
    spec = json.dumps(
        {
            "base": base,
            "cookies": dict(client.cookies.items()),
            "requests": args.requests,
            "seconds": args.seconds,
        }
    )
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        __file__,
        "--flood-client",
        spec,
        stdout=asyncio.subprocess.PIPE,
    )
    out, _ = await proc.communicate()
    return json.loads(out.decode().strip().splitlines()[-1])


async def _run(base: str, web_pid: int, args) -> None:
    flooder = await _login(base, "flooder", "flood-pass-123")
    bystander = await _login(base, "bystander", "flood-pass-123")
    await _bystander(bystander, 2)  # warm-up
    unloaded = await _bystander(bystander, args.turns)
    started = time.monotonic()
    web_cpu = proc_cpu_s(web_pid)
    flood = asyncio.ensure_future(_flood_process(base, flooder, args))
    await asyncio.sleep(min(1.0, args.seconds / 5))  # the flood under way
    loaded = await _bystander(bystander, args.turns)
    report = await flood
    took = time.monotonic() - started
    web_cores = (proc_cpu_s(web_pid) - web_cpu) / took
    client_cores = report["cpu_s"] / took
    await flooder.aclose()
    await bystander.aclose()
    unloaded = [t for t in unloaded if t == t]  # nan: refused, printed above
    loaded = [t for t in loaded if t == t]
    p50_idle, p50_load = statistics.median(unloaded), statistics.median(loaded)
    ratio = p50_load / p50_idle
    statuses = {int(k): v for k, v in report["statuses"].items()}
    print(
        f"flood: {args.requests} POSTs in {took:.1f} s: {dict(sorted(statuses.items()))}"
    )
    print(f"every 429 had Retry-After: {report['retry_after']}")
    print(f"bystander TTFT p50 unloaded: {p50_idle:7.1f} ms  ({len(unloaded)} turns)")
    print(f"bystander TTFT p50 loaded:   {p50_load:7.1f} ms  ({len(loaded)} turns)")
    print(f"ratio loaded/unloaded: {ratio:.2f} (target <= 2)")
    print(
        f"CPU while flooding ({took:.1f} s): web process {web_cores:.2f} cores, "
        f"flood client {client_cores:.2f} cores (its own process); "
        f"load average {os.getloadavg()}"
    )
    per_request_ms = web_cores * took * 1000 / args.requests
    print(
        f"web CPU per flood request: {per_request_ms:.2f} ms (the bystander's turns "
        "included)"
    )
    params = f"{args.requests} requests in {args.seconds:g} s"
    figures = [
        ("bystander TTFT p50 loaded/unloaded", ratio, "x", "<= 2"),
        ("web CPU while flooding", web_cores, "cores", ""),
        ("flood client CPU", client_cores, "cores", ""),
    ]
    figures_record(bench="flood", params=params, figures=figures)


def main() -> None:
    import argparse

    parser = option_parser(requests=1000, seconds=10.0, turns=10)
    parser.add_argument("--flood-client", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.flood_client:
        flood_client(args.flood_client)
        return
    django_start({"INFERENCE_DEFAULT_POOL": POOL, "LOG_LEVEL": "WARNING"})
    from django.contrib.auth import get_user_model

    from gateway.models import ModelPool, Plan, Subscription
    from tests.stack import running_processes

    pool, _ = ModelPool.objects.update_or_create(
        name=POOL,
        defaults={"model": "scripted-1", "engine": ModelPool.Engine.SCRIPTED},
    )
    plan, _ = Plan.objects.get_or_create(name="flood-bench")  # no token limits
    plan.allowed_pools.set([pool])
    for name in ("flooder", "bystander"):
        user, _ = get_user_model().objects.get_or_create(username=name)
        user.set_password("flood-pass-123")
        user.save()
        Subscription.objects.update_or_create(user=user, defaults={"plan": plan})
    worker = ["--pool", POOL, "--engine", "scripted", "--delay-ms", "20"]
    worker += ["--concurrency", "64"]
    with running_processes(worker, for_tests=False) as stack:
        asyncio.run(_run(stack.base, stack.web.process.pid, args))


if __name__ == "__main__":
    main()
