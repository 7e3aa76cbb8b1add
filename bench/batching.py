"""Continuous batching with the vLLM engine: aggregate tokens/s at 1, 4, 8, 16 jobs.

    make bench-batching
    # or: .venv-vllm/bin/python bench/batching.py [--levels 1,4,8,16] [--max-tokens 128]

Runs our :class:`inference.engines.vllm.VllmEngine` (vLLM CPU, SmolLM2-135M converted
from the bundled GGUF, ``max_concurrency`` = the highest level) in this process. For
each level N it starts N jobs at once (different prompts, ``ignore_eos`` so each
generates exactly ``--max-tokens`` tokens) and prints:

- aggregate tokens/s: all completion tokens / wall time from submit to the last Finish.
- per-stream tokens/s: one job's completion tokens / its own first-to-last delta time.
- TTFT (ms): submit -> first delta, median over the N jobs.
- max running: the most requests vLLM's scheduler ran in one step (SchedulerStats).

A warm-up round runs first and is not reported. Figures depend on the machine and its
load; the point is the shape of the curve (continuous batching must scale aggregate
throughput), not the absolute numbers.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.boot import ROOT, option_parser  # noqa: E402
from bench.corpus import STORY_TOPICS  # noqa: E402
from bench.record import bench_record  # noqa: E402


async def _one(engine, job_id: str, topic: str, max_tokens: int) -> dict:
    from inference.engines.base import Delta
    from inference.protocol import Job

    job = Job(
        job_id=job_id,
        messages=[{"role": "user", "content": f"Write a long story about {topic}."}],
        params={"max_tokens": max_tokens, "temperature": 0.7, "ignore_eos": True},
    )
    submitted = time.perf_counter()
    first = last = None
    finish = None
    async for item in engine.generate(job):
        now = time.perf_counter()
        if isinstance(item, Delta):
            first = first or now
            last = now
        else:
            finish = item
    tokens = finish.usage.completion_tokens
    return {
        "tokens": tokens,
        "ttft_ms": (first - submitted) * 1000 if first else float("nan"),
        "stream_tps": (tokens - 1) / (last - first) if first and last > first else 0.0,
        "end": time.perf_counter(),
    }


async def _level(engine, n: int, max_tokens: int, tag: str) -> dict:
    engine.counts.max_running = 0
    start = time.perf_counter()
    results = await asyncio.gather(
        *(
            _one(
                engine,
                f"{tag}-{n}-{i}",
                STORY_TOPICS[i % len(STORY_TOPICS)],
                max_tokens,
            )
            for i in range(n)
        )
    )
    wall = max(r["end"] for r in results) - start
    total = sum(r["tokens"] for r in results)
    return {
        "n": n,
        "tokens": total,
        "wall_s": wall,
        "agg_tps": total / wall,
        "stream_tps": statistics.median(r["stream_tps"] for r in results),
        "ttft_ms": statistics.median(r["ttft_ms"] for r in results),
        "max_running": engine.counts.max_running,
    }


async def main() -> None:
    parser = option_parser(levels="1,4,8,16", max_tokens=128)
    parser.add_argument("--model-dir", default=str(ROOT / ".var/models/smollm2-hf"))
    args = parser.parse_args()
    levels = [int(x) for x in args.levels.split(",")]

    from inference.engines.vllm import VllmEngine

    engine = VllmEngine(
        model_dir=args.model_dir, max_concurrency=max(levels), kv_cache_gib=1
    )
    t0 = time.perf_counter()
    await engine.start()
    print(f"vLLM engine started in {time.perf_counter() - t0:.1f} s", flush=True)
    try:
        await _level(engine, 2, 16, "warmup")
        rows = []
        for n in levels:
            row = await _level(engine, n, args.max_tokens, "bench")
            rows.append(row)
            print(
                f"  N={n}: {row['agg_tps']:.1f} tok/s aggregate ({row['wall_s']:.1f} s)",
                flush=True,
            )
    finally:
        await engine.close()

    base = rows[0]["agg_tps"]
    print()
    print(
        f"vLLM CPU (SmolLM2-135M bf16, {os.cpu_count()} cores), "
        f"{args.max_tokens} tokens per job"
    )
    print(
        "| concurrent jobs | aggregate tok/s | x vs N=1 | per-stream tok/s "
        "| median TTFT ms | max running |"
    )
    print("|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['n']} | {r['agg_tps']:.1f} | {r['agg_tps'] / base:.2f} "
            f"| {r['stream_tps']:.1f} | {r['ttft_ms']:.0f} | {r['max_running']} |"
        )
        shape = f"N={r['n']} jobs, {args.max_tokens} tokens each, vLLM CPU"
        for metric, value, unit in (
            ("aggregate throughput", r["agg_tps"], "tokens/s"),
            ("x vs N=1", r["agg_tps"] / base, "x"),
            ("TTFT p50", float(r["ttft_ms"]), "ms"),
        ):
            bench_record(
                bench="batching", metric=metric, value=value, unit=unit, params=shape
            )


if __name__ == "__main__":
    asyncio.run(main())
