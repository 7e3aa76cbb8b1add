"""A request flood from one user, and what other users' time to first token does.

    .venv/bin/python bench/flood.py [--requests 1000] [--seconds 10] [--turns 10]

Starts `daphne` and a scripted worker (`run_inference_worker --engine scripted`,
20 ms per token, so the figures measure the web tier, not a model) on the dev services
(run `make migrate` first), signs in a flooder and a bystander over HTTP, then:

1. unloaded: the bystander's client TTFT (POST sent -> first `token` frame) over
   ``--turns`` turns, one at a time;
2. loaded: the same while the flooder sends ``--requests`` message POSTs spread over
   ``--seconds`` seconds (64 at a time at most).

Prints the flood's status counts (201 accepted up to CHAT_MESSAGE_RATE, 429 with
Retry-After after), whether every 429 carried Retry-After, the bystander's TTFT p50
unloaded and loaded, and their ratio (issue 13 asks for at most 2x).
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chatsite.settings.dev")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

POOL = "flood-bench"  # a pool only this run's worker serves


async def _login(base: str, username: str, password: str):
    import httpx

    client = httpx.AsyncClient(base_url=base, timeout=60)
    await client.get("/login/")
    await client.post(
        "/login/",
        data={
            "username": username,
            "password": password,
            "csrfmiddlewaretoken": client.cookies["csrftoken"],
        },
    )
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


async def _flood(client, requests: int, seconds: float) -> tuple[Counter, bool]:
    statuses: Counter[int] = Counter()
    retry_after = True
    gate = asyncio.Semaphore(64)
    token = client.cookies["csrftoken"]

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
    return statuses, retry_after


async def _run(base: str, args) -> None:
    flooder = await _login(base, "flooder", "flood-pass-123")
    bystander = await _login(base, "bystander", "flood-pass-123")
    await _bystander(bystander, 2)  # warm-up
    unloaded = await _bystander(bystander, args.turns)
    started = time.monotonic()
    flood = asyncio.ensure_future(_flood(flooder, args.requests, args.seconds))
    await asyncio.sleep(min(1.0, args.seconds / 5))  # the flood under way
    loaded = await _bystander(bystander, args.turns)
    statuses, retry_after = await flood
    took = time.monotonic() - started
    await flooder.aclose()
    await bystander.aclose()
    unloaded = [t for t in unloaded if t == t]  # nan: refused, printed above
    loaded = [t for t in loaded if t == t]
    p50_idle, p50_load = statistics.median(unloaded), statistics.median(loaded)
    print(
        f"flood: {args.requests} POSTs in {took:.1f} s: {dict(sorted(statuses.items()))}"
    )
    print(f"every 429 had Retry-After: {retry_after}")
    print(f"bystander TTFT p50 unloaded: {p50_idle:7.1f} ms  ({len(unloaded)} turns)")
    print(f"bystander TTFT p50 loaded:   {p50_load:7.1f} ms  ({len(loaded)} turns)")
    print(f"ratio loaded/unloaded: {p50_load / p50_idle:.2f} (target <= 2)")


def main() -> None:
    import argparse

    import django

    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--turns", type=int, default=10)
    args = parser.parse_args()
    os.environ["INFERENCE_DEFAULT_POOL"] = POOL
    os.environ["LOG_LEVEL"] = "WARNING"
    django.setup()
    from django.contrib.auth import get_user_model

    from gateway.models import ModelPool, Plan, Subscription
    from tests.stack import running_stack

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
    with running_stack(worker, for_tests=False) as base:
        asyncio.run(_run(base, args))


if __name__ == "__main__":
    main()
