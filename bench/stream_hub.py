"""The stream hub (inference/streams.py) against one XREAD BLOCK per stream, in-process.

    .venv/bin/python bench/stream_hub.py [--streams 200 2000] [--tokens 100]
        [--delay-ms 20] [--modes per-stream hub hub-xread] [--hold-ms 143]
        (defaults: 200 streams, 50 tokens, modes per-stream and hub, no hold)

N followers each follow their own generation stream; a writer thread appends one token
to every stream every ``--delay-ms`` ms (one pipeline per tick, the sync client, so
its CPU is not the event loop's). Two ways to read, one after the other on the same
event loop:

- ``per-stream``: each follower does its own ``XREAD BLOCK`` (inference.client.agen_read,
  as generation_follow did before the hub): one pooled connection each;
- ``hub``: every follower reads from one StreamHub (one XREAD for all streams; a
  busy round through the joined read, a stream's tokens of a round as one event);
- ``hub-xread``: the same hub reading every round with XREAD (``joined=False``; each
  stream's tokens of a round still come as one event, joined in the process).

``--hold-ms`` makes each follower wait that long after each read (and say so through
``Subscription.due``), as generation_follow's coalescing does (2,000 streams: 143 ms).

Figures: event-loop CPU per token entry delivered (us, ``time.thread_time`` of the loop's
thread: reads, parsing and dispatch, not the writer), Redis connections opened by the
reader side, delivery lag (XADD's entry time to the follower, p50/p99 ms), and for the
hub the time a follower subscribing while the reader blocks waits for its first event
(with the wake-up stream, p50/max ms of 20 tries against a 1 s block).

Runs on the dev Redis (`make services`); the machine's load makes the figures upper
bounds (the load average is printed).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.boot import django_start, option_parser  # noqa: E402
from bench.record import bench_record, figures_record, pct  # noqa: E402


def _writer(
    gen_keys: list[str], tokens: int, delay_s: float, stop: threading.Event
) -> None:
    """Append ``tokens`` token events to every stream, one pipeline per tick."""
    from inference import protocol
    from inference.connections import redis_sync

    client = redis_sync()
    fields = protocol.token_fields("tok ")
    next_at = time.monotonic()
    for _ in range(tokens):
        if stop.is_set():
            return
        pipe = client.pipeline(transaction=False)
        for key in gen_keys:
            pipe.xadd(key, fields)
        pipe.execute()
        next_at += delay_s
        time.sleep(max(0.0, next_at - time.monotonic()))


async def _run(mode: str, n: int, args: argparse.Namespace) -> dict:
    from inference import client as inference_client
    from inference import keys, protocol
    from inference.connections import redis_sync
    from inference.streams import StreamHub

    redis = redis_sync()
    tag = f"hubbench-{mode}-{time.time_ns()}"
    jobs = [f"{tag}-{i}" for i in range(n)]
    gen_keys = [keys.gen_key(j) for j in jobs]
    lags: list[float] = []
    got = [0] * n
    reads = [0]  # XREAD commands sent by the per-stream followers
    hub = StreamHub(url=_url(), joined=mode == "hub")
    clients0 = redis.info("clients")["connected_clients"]

    async def follow(i: int) -> None:
        after = protocol.STREAM_START
        hubbed = mode.startswith("hub")
        sub = hub.subscribe(job_id=jobs[i], after=after) if hubbed else None
        loop = asyncio.get_running_loop()
        try:
            while got[i] < args.tokens:
                if sub is not None:
                    events = await sub.next(timeout_s=1.0)
                else:
                    reads[0] += 1
                    events = await inference_client.agen_read(
                        job_id=jobs[i], after=after, block_ms=1000
                    )
                now_ms = time.time() * 1000
                for e in events:
                    lags.append(now_ms - int(e.id.split("-")[0]))
                if events:
                    after = events[-1].id
                    got[i] += sum(e.tokens for e in events)
                    if sub is not None and args.hold_ms > 0:
                        sub.due = loop.time() + args.hold_ms / 1000
                        await asyncio.sleep(args.hold_ms / 1000)
        finally:
            if sub is not None:
                sub.close()

    tasks = [asyncio.create_task(follow(i)) for i in range(n)]
    await asyncio.sleep(0.5)  # every follower waits (blocked XREADs, or the hub)
    clients = redis.info("clients")["connected_clients"] - clients0
    stop = threading.Event()
    writer = threading.Thread(
        target=_writer, args=(gen_keys, args.tokens, args.delay_ms / 1000, stop)
    )
    cpu0, t0 = time.thread_time(), time.monotonic()
    redis_cpu0 = _redis_cpu_s(redis)
    writer.start()
    try:
        await asyncio.wait_for(asyncio.gather(*tasks), timeout=args.tokens * 2 + 60)
    finally:
        stop.set()
        writer.join()
    cpu, wall = time.thread_time() - cpu0, time.monotonic() - t0
    redis_cpu = _redis_cpu_s(redis) - redis_cpu0
    redis.delete(*gen_keys)
    events = sum(got)
    return {
        "mode": mode,
        "n": n,
        "events": events,
        "cpu_us_per_event": cpu * 1e6 / max(1, events),
        "loop_cores": cpu / wall,
        "redis_us_per_event": redis_cpu * 1e6 / max(1, events),
        "connections": clients,
        "lag_p50": pct(lags, 50),
        "lag_p99": pct(lags, 99),
        "rounds": hub.rounds if mode.startswith("hub") else reads[0],
    }


def _redis_cpu_s(redis: Any) -> float:
    """The Redis server's CPU so far (s; INFO cpu, main thread and children)."""
    cpu = redis.info("cpu")
    return float(cpu["used_cpu_sys"]) + float(cpu["used_cpu_user"])


def _url() -> str:
    from django.conf import settings

    return settings.REDIS_URL


async def _subscribe_latency(tries: int = 20) -> list[float]:
    """ms from subscribing (while the hub's XREAD blocks, 1 s) to the first event."""
    from inference import keys, protocol
    from inference.connections import redis_async
    from inference.streams import StreamHub

    hub = StreamHub(url=_url())
    anchor = hub.subscribe(job_id=f"hubbench-anchor-{time.time_ns()}", after="0-0")
    waits = []
    for i in range(tries):
        while not hub._reading:
            await asyncio.sleep(0.001)
        await asyncio.sleep(0.02)  # the XREAD is pending at Redis
        job = f"hubbench-late-{time.time_ns()}-{i}"
        started = time.monotonic()
        sub = hub.subscribe(job_id=job, after=protocol.STREAM_START)
        await redis_async().xadd(keys.gen_key(job), protocol.token_fields("x"))
        await sub.next(timeout_s=5)
        waits.append((time.monotonic() - started) * 1000)
        sub.close()
        await redis_async().delete(keys.gen_key(job))
    anchor.close()
    return waits


def main() -> None:
    parser = option_parser(
        __doc__.split("\n\n")[0],
        streams=[200],
        tokens=50,
        delay_ms=20.0,
        modes=["per-stream", "hub"],
        hold_ms=0.0,
    )
    args = parser.parse_args()
    django_start()
    rows = [asyncio.run(_run(m, n, args)) for n in args.streams for m in args.modes]
    waits = asyncio.run(_subscribe_latency())
    load = os.getloadavg()[0]
    print(
        f"\n{args.tokens} tokens per stream, {args.delay_ms:g} ms apart; load average "
        f"{load:.1f} on {os.cpu_count()} cores\n"
    )
    print(
        "mode        streams  tokens  loop us/token  loop cores  Redis us/token  conns"
        "  lag p50/p99 ms  rounds"
    )
    for r in rows:
        print(
            f"{r['mode']:10s}  {r['n']:7d}  {r['events']:6d}  {r['cpu_us_per_event']:13.1f}"
            f"  {r['loop_cores']:10.2f}  {r['redis_us_per_event']:14.1f}"
            f"  {r['connections']:5d}  "
            f"{r['lag_p50']:6.1f}/{r['lag_p99']:6.1f}  {r['rounds']:6d}"
        )
        params = f"N={r['n']}, {r['mode']}, load {load:.1f} on {os.cpu_count()} cores"
        figures = [
            ("loop CPU per event", r["cpu_us_per_event"], "us", ""),
            ("delivery lag p99", r["lag_p99"], "ms", ""),
        ]
        figures_record(bench="stream_hub", params=params, figures=figures)
    print(
        f"\nsubscribe while the hub's XREAD blocks (1 s): first event after "
        f"p50 {pct(waits, 50):.1f} ms, max {max(waits):.1f} ms ({len(waits)} tries)"
    )
    bench_record(
        bench="stream_hub",
        metric="first event after subscribing while blocked, max",
        value=max(waits),
        unit="ms",
        params=f"1 s block, load {load:.1f}",
    )


if __name__ == "__main__":
    main()
