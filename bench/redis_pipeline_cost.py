"""CPU of one submission-shaped Redis pipeline: redis-py's sync client against its
asyncio client, in this process.

    .venv/bin/python bench/redis_pipeline_cost.py [--requests 2000] [--repeat 2]

The pipeline is the shape of the API's submission round trip
(:func:`gateway.generations.generation_submit`): a SET of a 600-byte job with a TTL,
an XADD of it (capped stream) and a ZREM, on throw-away ``bench:pc:*`` keys of the dev
Redis. Each variant sends ``--requests`` of them: sync one at a time; sync from 4
threads (as the db_quick pool sends them); async one at a time; async 50 at once
(as a burst of 50 API requests would on the event loop). Printed per pipeline (µs):
this process's CPU (``time.process_time``) and wall time. Pinned to the first core;
Redis where the dev services run.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("LOG_LEVEL", "WARNING")

from bench.boot import django_start, option_parser  # noqa: E402

ENTRY = {"job": "x" * 600}


def queue(pipe: Any, i: int) -> None:
    """Queue the three commands of submission ``i`` on ``pipe``."""
    pipe.set(f"bench:pc:job:{i}", "x" * 600, ex=60)
    pipe.xadd("bench:pc:q", ENTRY, maxlen=1000, approximate=True)
    pipe.zrem("bench:pc:uns", f"m{i}")


def main() -> None:
    parser = option_parser(__doc__, requests=2000)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    django_start()
    import uvloop

    from bench.cpu_pin import load_note
    from inference.connections import redis_async, redis_sync

    n = args.requests

    def per(c0: float, t0: float) -> str:
        cpu = (time.process_time() - c0) / n * 1e6
        wall = (time.perf_counter() - t0) / n * 1e6
        return f"CPU {cpu:6.0f}  wall {wall:6.0f}"

    def sync_one(i: int) -> None:
        with redis_sync().pipeline(transaction=False) as pipe:
            queue(pipe, i)
            pipe.execute()

    def sync_serial() -> str:
        c0, t0 = time.process_time(), time.perf_counter()
        for i in range(n):
            sync_one(i)
        return per(c0, t0)

    def sync_threads(k: int = 4) -> str:
        c0, t0 = time.process_time(), time.perf_counter()
        threads = [
            threading.Thread(target=lambda j=j: [sync_one(i) for i in range(j, n, k)])
            for j in range(k)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return per(c0, t0)

    async def async_one(i: int) -> None:
        async with redis_async().pipeline(transaction=False) as pipe:
            queue(pipe, i)
            await pipe.execute()

    async def async_bursts(conc: int) -> str:
        c0, t0 = time.process_time(), time.perf_counter()
        for start in range(0, n, conc):
            await asyncio.gather(*(async_one(i) for i in range(start, start + conc)))
        return per(c0, t0)

    loop = uvloop.new_event_loop()
    asyncio.set_event_loop(loop)
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    print(f"{n} pipelines per variant, µs per pipeline; {load_note()}")
    for _ in range(args.repeat):
        print(f"  sync, one at a time     {sync_serial()}")
        print(f"  sync, 4 threads         {sync_threads()}")
        print(f"  async, one at a time    {loop.run_until_complete(async_bursts(1))}")
        print(f"  async, 50 at once       {loop.run_until_complete(async_bursts(50))}")
    redis_sync().delete("bench:pc:q", "bench:pc:uns")
    print(load_note())


if __name__ == "__main__":
    main()
