"""The worker's share of TTFT, two worker builds side by side on one upstream.

    .venv/bin/python bench/worker_ttft.py --base DIR [--jobs 300] [--token-ms 5]

Starts the bench upstream (bench/upstream.py) and two ``run_inference_worker
--engine openai`` processes in front of it: ``base`` runs the code under ``--base``
(a checkout of another commit, e.g. ``git archive HEAD~1 | tar -x -C DIR``, with a
``.venv`` link), ``this`` the code of this tree, each on a pool of its own. Jobs go
to the two pools in turn (ABBA, one at a time): each is enqueued straight on its
pool's queue (no web tier) and its ``inf:gen`` stream read (XREAD BLOCK) until its
first ``token``, so the time covers the queue hop, the worker's start of the job,
the upstream request to its first chunk (``--token-ms`` of it the upstream's own
wait) and the token's write, read back by a client on the same machine. A direct
request to the upstream (httpx, streaming, to its first content chunk) is timed
beside each pair. Prints p50/p90 (ms) of each, each worker minus direct, its
stages, and the median of the job-by-job differences (this minus base).
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("LOG_LEVEL", "WARNING")

from bench.boot import ROOT, django_start, option_parser  # noqa: E402
from bench.procs import (  # noqa: E402
    free_port,
    http_wait,
    processes_stop,
    spawn,
    workers_wait,
)

MODEL = "bench-fixed"


def _job_ttft(redis: Any, pool: str, stages: list[tuple[float, float]]) -> float:
    """Enqueue one job on ``pool``; ms until its first token is read back (the
    job is read to its end before this returns)."""
    from inference import client, jobs, keys

    job = jobs.job_build(
        messages=[{"role": "user", "content": "Say the fixed answer."}],
        params={"max_tokens": 256},
        timeout_s=30,
    )
    gen = keys.gen_key(job.job_id)
    start = time.perf_counter()
    client.job_enqueue(pool=pool, job=job, client=redis)
    last, took, meta_ms = "0", 0.0, 0
    while True:
        for _key, entries in redis.xread({gen: last}, block=5000) or []:
            for entry_id, fields in entries:
                last = entry_id
                at_ms = int(entry_id.split("-")[0])
                if fields.get("e") == "meta":
                    meta_ms = at_ms
                if fields.get("e") == "token" and not took:
                    took = (time.perf_counter() - start) * 1000
                    stages.append((meta_ms - job.enqueued_at * 1000, at_ms - meta_ms))
                elif fields.get("e") in ("done", "error"):
                    if not took:
                        raise RuntimeError(f"{pool}: ended without a token: {fields}")
                    return took  # read to the end: the next job has the machine


def _direct_ttft(http: httpx.Client, upstream: str) -> float:
    """ms from sending a streaming request to the upstream to its first content."""
    start = time.perf_counter()
    body = {"model": MODEL, "messages": [{"role": "user", "content": "x"}]}
    with http.stream("POST", f"{upstream}/v1/chat/completions", json=body) as resp:
        took = 0.0
        for line in resp.iter_lines():
            if not took and '"content": " tok' in line:
                took = (time.perf_counter() - start) * 1000
    return took


def main() -> None:
    args = option_parser(base="", jobs=300, token_ms=5.0).parse_args()
    if not args.base:
        sys.exit("--base DIR: a checkout of the code to compare with")
    django_start()
    from inference.connections import redis_sync

    env = {
        **os.environ,
        "BENCH_TOKENS": "8",
        "BENCH_TOKEN_MS": str(args.token_ms),
        "PYTHONUNBUFFERED": "1",
        "DJANGO_DEBUG": "0",
    }
    # the base checkout has no services file of its own: it uses ours
    from django.conf import settings

    db = settings.DATABASES["default"]
    env["REDIS_URL"] = settings.REDIS_URL
    env["DATABASE_URL"] = (
        f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"
    )
    up_port = free_port()
    upstream = f"http://127.0.0.1:{up_port}"
    procs = [
        spawn(
            [sys.executable, "bench/upstream.py", "--port", str(up_port)],
            cwd=ROOT,
            env=env,
        )
    ]
    pools = {"base": "wt-base", "this": "wt-this"}
    trees = {"base": Path(args.base).resolve(), "this": ROOT}
    try:
        for name, pool in pools.items():
            argv = [sys.executable, "manage.py", "run_inference_worker"]
            argv += ["--pool", pool, "--engine", "openai", "--base-url", upstream]
            argv += ["--model", MODEL, "--concurrency", "4"]
            procs.append(spawn(argv, cwd=trees[name], env=env, stderr=True))
        http_wait(upstream + "/v1/models", procs)
        workers_wait(list(pools.values()), procs, timeout_s=60)
        redis = redis_sync()
        times: dict[str, list[float]] = {"direct": [], "base": [], "this": []}
        stages: dict[str, list[tuple[float, float]]] = {"base": [], "this": []}
        with httpx.Client() as http:
            for _ in range(5):  # warm both workers' connections
                for pool in pools.values():
                    _job_ttft(redis, pool, [])
            for i in range(args.jobs):
                order = ["base", "this"] if i % 2 == 0 else ["this", "base"]
                for name in order:
                    times[name].append(_job_ttft(redis, pools[name], stages[name]))
                times["direct"].append(_direct_ttft(http, upstream))
        print(
            f"{args.jobs} jobs per worker, upstream first chunk after "
            f"{args.token_ms} ms; load average {os.getloadavg()[0]:.2f}"
        )
        direct = statistics.median(times["direct"])
        for name, values in times.items():
            qs = statistics.quantiles(values, n=10)
            print(
                f"{name:>7}: p50 {statistics.median(values):6.2f}  p90 {qs[-1]:6.2f}"
                + (
                    ""
                    if name == "direct"
                    else f"  p50 minus direct {statistics.median(values) - direct:5.2f}"
                    + "  stages p50: to meta {:.1f}, meta to token {:.1f}".format(
                        *(statistics.median(s) for s in zip(*stages[name], strict=True))
                    )
                )
            )
        paired = [t - b for t, b in zip(times["this"], times["base"], strict=True)]
        print(f"this minus base, job by job: median {statistics.median(paired):.2f}")
    finally:
        processes_stop(procs)


if __name__ == "__main__":
    main()
