"""The inference worker's CPU per request at concurrency c, two worker builds
alternated on one upstream.

    .venv/bin/python bench/worker_load.py --base DIR [--concurrency 50] [--jobs 200]
        [--rounds 6] [--tokens 32] [--token-ms 5]

Starts the bench upstream (bench/upstream.py) and two ``run_inference_worker
--engine openai`` processes in front of it: ``base`` runs the code under ``--base``
(a checkout of another commit with a ``.venv`` link), ``this`` the code of this
tree, each on a pool of its own. Everything (upstream, both workers, this client)
is pinned to the load core (bench/pinning.py), as in bench/gateway_overhead.py.
Each round sends ``--jobs`` jobs to one pool, ``--concurrency`` at a time, straight
on its queue (no web tier), and reads each job's ``inf:gen`` stream to its end;
rounds alternate base / this. ``--rate R`` starts the jobs at R per second (each as
soon as one of the ``--concurrency`` lanes is free after its time), so both builds
are compared at one throughput: a process that keeps up reads each chunk on its
own, one that falls behind reads several at once, and its CPU per job falls. Per round it prints the worker's CPU per job (ms,
from /proc), TTFT p50 (enqueue to the first token's entry, ms), jobs/s and the load
average; every answer is checked to be the upstream's tokens in order and ``done``. ``--py-spy PREFIX`` profiles each build's first measured round
(py-spy raw, ``PREFIX-base.txt`` / ``PREFIX-this.txt``; py-spy's CPU is on the
load core too, so those rounds' figures are not comparable to the others).
"""

from __future__ import annotations

import asyncio
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("LOG_LEVEL", "WARNING")

from bench.boot import ROOT, django_start, option_parser  # noqa: E402
from bench.pinning import pinning_plan  # noqa: E402
from bench.procs import (  # noqa: E402
    free_port,
    http_wait,
    processes_stop,
    spawn,
    workers_wait,
)
from bench.procstat import proc_cpu_s  # noqa: E402

MODEL = "bench-fixed"


async def _one(redis: Any, pool: str, tokens: int) -> float:
    """Run one job on ``pool``; return its TTFT in ms (enqueue to the first token's
    entry). Raises AssertionError when the answer is not the upstream's."""
    from inference import jobs, keys, protocol

    job = jobs.job_build(
        messages=[{"role": "user", "content": "Say the fixed answer."}],
        params={"max_tokens": 256},
        timeout_s=60,
    )
    gen = keys.gen_key(job.job_id)
    await redis.xadd(keys.queue_key(pool), job.to_fields())
    last, first_ms, texts = "0", 0.0, []
    while True:
        for _key, entries in await redis.xread({gen: last}, block=2000) or []:
            for entry_id, fields in entries:
                last = entry_id
                event = protocol.event_parse(entry_id, fields)
                if event.type == "token":
                    if not first_ms:
                        first_ms = int(entry_id.split("-")[0]) - job.enqueued_at * 1000
                    texts.append(event.data["t"])
                elif event.type in ("done", "error"):
                    assert event.type == "done", event.data
                    assert texts == [f" tok{i}" for i in range(tokens)], texts
                    assert event.data["usage"]["completion_tokens"] == tokens
                    return first_ms


async def _round(
    redis_url: str, pool: str, jobs: int, c: int, tokens: int, rate: float = 0.0
) -> list:
    import redis.asyncio as aioredis

    redis = aioredis.from_url(
        redis_url, decode_responses=True, max_connections=c + 8, socket_timeout=30
    )
    left = iter(range(jobs))
    ttfts: list[float] = []

    loop = asyncio.get_running_loop()
    start = loop.time()

    async def lane() -> None:
        for i in left:
            if rate:  # job i starts at i / rate s, if a lane is free by then
                await asyncio.sleep(max(0.0, start + i / rate - loop.time()))
            ttfts.append(await _one(redis, pool, tokens))

    try:
        await asyncio.gather(*(lane() for _ in range(c)))
    finally:
        await redis.aclose()
    return ttfts


def main() -> None:
    args = option_parser(
        base="",
        concurrency=50,
        jobs=200,
        rounds=6,
        tokens=32,
        token_ms=5.0,
        py_spy="",
        rate=0.0,
    ).parse_args()
    if not args.base:
        sys.exit("--base DIR: a checkout of the code to compare with")
    django_start()
    from django.conf import settings

    env = {
        **os.environ,
        "BENCH_TOKENS": str(args.tokens),
        "BENCH_TOKEN_MS": str(args.token_ms),
        "PYTHONUNBUFFERED": "1",
        "DJANGO_DEBUG": "0",
    }
    db = settings.DATABASES["default"]
    env["REDIS_URL"] = settings.REDIS_URL
    env["DATABASE_URL"] = (
        f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"
    )
    pinning = pinning_plan()
    pinning.pin(os.getpid(), web=False)
    up_port = free_port()
    upstream = f"http://127.0.0.1:{up_port}"
    procs = [
        spawn(
            [sys.executable, "bench/upstream.py", "--port", str(up_port)],
            cwd=ROOT,
            env=env,
        )
    ]
    pools = {"base": "wl-base", "this": "wl-this"}
    trees = {"base": Path(args.base).resolve(), "this": ROOT}
    workers = {}
    try:
        for name, pool in pools.items():
            argv = [sys.executable, "manage.py", "run_inference_worker"]
            argv += ["--pool", pool, "--engine", "openai", "--base-url", upstream]
            argv += ["--model", MODEL, "--concurrency", str(args.concurrency + 8)]
            workers[name] = spawn(argv, cwd=trees[name], env=env, stderr=True)
            procs.append(workers[name])
        http_wait(upstream + "/v1/models", procs)
        workers_wait(list(pools.values()), procs, timeout_s=60)
        for proc in procs:
            pinning.pin(proc.pid, web=False)
        print(f"pinning: {pinning.describe()}; c={args.concurrency}, {args.jobs} jobs")
        print(
            f"per round, {args.tokens} chunks {args.token_ms} ms apart, rate {args.rate or 'open'}"
        )
        for pool in pools.values():  # warm up: connections, imports
            asyncio.run(_round(settings.REDIS_URL, pool, 60, args.concurrency, 32))
        cpu: dict[str, list[float]] = {"base": [], "this": []}
        for r in range(args.rounds):
            for name in ("base", "this") if r % 2 == 0 else ("this", "base"):
                pid = workers[name].pid
                spy = None
                if args.py_spy and r < 2:  # each build's first round, profiled
                    out = f"{args.py_spy}-{name}.txt"
                    spy = subprocess.Popen(
                        [
                            str(Path(sys.executable).parent / "py-spy"),
                            "record",
                            "-p",
                            str(pid),
                        ]
                        + ["-r", "250", "-f", "raw", "-o", out, "--nonblocking"],
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                    )
                load = os.getloadavg()[0]
                cpu0, t0 = proc_cpu_s(pid), time.perf_counter()
                ttfts = asyncio.run(
                    _round(
                        settings.REDIS_URL,
                        pools[name],
                        args.jobs,
                        args.concurrency,
                        args.tokens,
                        args.rate,
                    )
                )
                wall = time.perf_counter() - t0
                if spy is not None:
                    spy.send_signal(signal.SIGINT)
                    spy.wait(timeout=30)
                per_job = (proc_cpu_s(pid) - cpu0) * 1000 / args.jobs
                cpu[name].append(per_job)
                print(
                    f"round {r} {name:>4}: worker CPU {per_job:6.2f} ms/job, "
                    f"TTFT p50 {statistics.median(ttfts):7.1f} ms, "
                    f"{args.jobs / wall:6.1f} jobs/s, load avg {load:.2f}",
                    flush=True,
                )
        for name, values in cpu.items():
            print(
                f"{name}: worker CPU per job median {statistics.median(values):.2f} ms"
                f" ({', '.join(f'{v:.2f}' for v in values)})"
            )
    finally:
        processes_stop(procs)


if __name__ == "__main__":
    main()
