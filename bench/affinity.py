"""Conversation affinity: follow-up TTFT and prefix-cache hits, with and without it.

    .venv/bin/python bench/affinity.py [--conversations 2] [--turns 10]
        [--question-words 40] [--max-tokens 8] [--threads 1] [--think-s 0]
        [--prompt-cache-mb 64] [--saturate]
    # vLLM CPU: .venv-vllm/bin/python bench/affinity.py --engine vllm

Two workers of one pool, in this process (each on its own event loop and thread, one
engine each: llama.cpp with the embedded SmolLM2-135M GGUF, one slot and ``--threads``
threads, or vLLM), on the Redis of the settings (``scripts/services.py up``). The same
``--conversations`` run at once, each ``--turns`` turns in order (the next turn is sent
0 to ``--think-s`` seconds after the previous one ended, drawn per turn with a fixed
seed); every turn repeats the whole history, with canned
answers, so every mode sends the same prompts. Modes:

- ``off``: no affinity (INFERENCE_AFFINITY off: every job on the pool's queue);
- ``on``: the job names its conversation and :func:`inference.affinity.job_route`
  sends it to the worker that served the previous turn when that one is free;
- with ``--saturate``, ``off-sat`` and ``on-sat``: after every conversation's first
  turn one worker's only slot is taken by a long job (it runs to the end of the mode),
  so conversations that preferred it must go to the other.

Figures per mode, over follow-up turns with at least ``--history`` earlier turns
(default 8): TTFT p50 and p90 (the worker's ``done`` event: enqueue -> first token)
and the prefix-cache hit rate (cached / prompt tokens, the engine's usage), plus the
routing outcomes (hit, miss_*, fallback) counted by this process. Sampling is at
temperature 0.7 (llama.cpp evaluates a greedy prompt whole, inference/engines/llamacpp.py).
``--prompt-cache-mb``: the llama.cpp workers' prompt cache
(inference/engines/llamacpp_cache.py); with more conversations than workers a
one-slot context holds only the last one's history without it.
"""

from __future__ import annotations

import asyncio
import os
import random
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.boot import ROOT, django_start, option_parser  # noqa: E402
from bench.record import bench_record, pct  # noqa: E402

POOL = "bench-affinity"
WORDS = (
    "garden soil water light seed root leaf bee flower shade season rain tool "
    "compost fruit tree grass stone path fence bird insect summer winter spring"
).split()


def question(conv: int, turn: int, words: int) -> str:
    """A deterministic question of ``words`` words for turn ``turn`` of ``conv``."""
    picked = [WORDS[(conv * 7 + turn * 3 + i * 5) % len(WORDS)] for i in range(words)]
    return f"Question {turn} of talk {conv}: " + " ".join(picked) + "?"


def messages_of(conv: int, turn: int, words: int) -> list[dict[str, str]]:
    messages = [{"role": "system", "content": "You are a helpful gardening assistant."}]
    for t in range(turn + 1):
        messages.append({"role": "user", "content": question(conv, t, words)})
        if t < turn:
            messages.append(
                {"role": "assistant", "content": f"Answer {t}: plant it in spring."}
            )
    return messages


class WorkerThread:
    """One Worker on its own event loop in a thread (stopped by :meth:`stop`)."""

    def __init__(self, engine: Any) -> None:
        from inference.worker import Worker

        self.worker = Worker(
            pool=POOL,
            engine=engine,
            redis_url=os.environ.get("REDIS_URL") or _redis_url(),
            heartbeat_s=0.5,
            block_ms=100,
            worker_id=f"bench-{uuid.uuid4().hex[:6]}",
        )
        self.loop: asyncio.AbstractEventLoop | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        async def main() -> None:
            self.loop = asyncio.get_running_loop()
            await self.worker.run()

        asyncio.run(main())

    def start(self) -> WorkerThread:
        from inference.connections import redis_sync
        from inference.protocol import worker_key

        self.thread.start()
        deadline = time.time() + 120
        while not redis_sync().hget(worker_key(self.worker.worker_id), "heartbeat"):
            if time.time() > deadline or not self.thread.is_alive():
                raise RuntimeError("bench worker did not start")
            time.sleep(0.05)
        return self

    def stop(self) -> None:
        if self.loop is not None:
            self.loop.call_soon_threadsafe(lambda: self.worker.stop(abort_running=True))
        self.thread.join(timeout=60)


def _redis_url() -> str:
    from django.conf import settings

    return settings.REDIS_URL


def worker_procs(args: Any) -> list[Any]:
    """Start two ``run_inference_worker`` processes of POOL (``--procs``); return
    them once both beat."""
    import subprocess

    from inference.connections import redis_sync
    from inference.protocol import workers_key

    argv = [sys.executable, str(ROOT / "manage.py"), "run_inference_worker"]
    argv += ["--engine", args.engine, "--pool", POOL, "--concurrency", str(args.slots)]
    if args.engine == "vllm":
        argv += ["--model", args.model_dir]
    else:
        argv += ["--threads", str(args.threads), "--n-ctx", str(args.n_ctx)]
        argv += ["--prompt-cache-mb", str(args.prompt_cache_mb)]
    env = {**os.environ, "INFERENCE_HEARTBEAT_S": "0.5", "LOG_LEVEL": "WARNING"}
    procs = [subprocess.Popen(argv, env=env, cwd=ROOT) for _ in range(2)]
    deadline = time.time() + 600
    while redis_sync().zcount(workers_key(POOL), time.time() - 5, "+inf") < 2:
        if time.time() > deadline or any(p.poll() is not None for p in procs):
            raise RuntimeError("bench worker processes did not start")
        time.sleep(0.5)
    return procs


def engine_new(args: Any) -> Any:
    if args.engine == "vllm":
        from inference.engines.vllm import VllmEngine

        return VllmEngine(
            model_dir=args.model_dir, max_concurrency=args.slots, kv_cache_gib=1
        )
    from inference.engines.llamacpp import LlamaCppEngine

    return LlamaCppEngine(
        n_ctx=args.n_ctx,
        n_threads=args.threads,
        slots=args.slots,
        background_slot=False,
        prompt_cache_mb=args.prompt_cache_mb,
    )


def run_turn(job: Any, use_affinity: bool) -> dict[str, Any]:
    """Route, enqueue and wait for one turn; return its figures."""
    from inference import affinity, client
    from inference.connections import redis_sync

    worker = (
        affinity.job_route(redis_sync(), pool=POOL, job=job) if use_affinity else None
    )
    client.job_enqueue(pool=POOL, job=job, worker=worker)
    deadline = time.time() + 300
    while True:
        events = client.generation_events(job_id=job.job_id)
        if events and events[-1].is_terminal:
            break
        if time.time() > deadline:
            raise RuntimeError(f"turn {job.job_id} did not end")
        time.sleep(0.005)
    end = events[-1]
    if end.type != "done":
        raise RuntimeError(f"turn {job.job_id} failed: {end.data}")
    usage = end.data["usage"]
    return {
        "ttft_ms": end.data["ttft_ms"],
        "prompt": usage["prompt_tokens"],
        "cached": usage["cached_tokens"],
        "worker": events[0].data["worker"],
        "queue_ms": events[0].data["queue_ms"],
    }


def run_mode(args: Any, mode: str) -> dict[str, Any]:
    """Run every conversation once under ``mode``; return the mode's figures."""
    from inference import affinity, client, keys, metrics, protocol
    from inference.connections import redis_sync

    use_affinity = mode.startswith("on")
    workers = (
        [] if args.procs else [WorkerThread(engine_new(args)).start() for _ in range(2)]
    )
    first_done = threading.Barrier(args.conversations + 1)
    rows: list[dict[str, Any]] = []
    lock = threading.Lock()
    run_id = uuid.uuid4().hex[:6]

    def conversation(conv: int) -> None:
        for turn in range(args.turns):
            now = time.time()
            messages = messages_of(conv, turn, args.question_words)
            if args.procs:
                # the workers (and their caches) serve every mode: each mode's
                # conversations open with their own words, so no mode reuses another's
                messages[0]["content"] += f" ({mode} session)"
            job = protocol.Job(
                job_id=f"aff-{run_id}-{conv}-{turn}",
                messages=messages,
                params={
                    "max_tokens": args.max_tokens,
                    "temperature": 0.7,
                    "seed": conv * 1000 + turn,
                },
                user_ref=f"bench-{run_id}",
                enqueued_at=now,
                deadline=now + 300,
                affinity=affinity.affinity_of(
                    user_ref=f"bench-{run_id}-{conv}", messages=messages
                )
                if use_affinity
                else "",
            )
            row = run_turn(job, use_affinity)
            row.update(conv=conv, turn=turn)
            if args.verbose:
                print(f"  {mode} {row}", flush=True)
            with lock:
                rows.append(row)
            if turn == 0:
                first_done.wait()
            # a person reads: a think time drawn per (conversation, turn), the same
            # in every mode, so the conversations do not move in lockstep
            time.sleep(random.Random(conv * 1000 + turn).uniform(0, args.think_s))

    def outcomes() -> dict[str, float]:
        found = {}
        for outcome in ("hit", "miss_new", "miss_dead", "miss_saturated"):
            found[outcome] = metrics.AFFINITY_ROUTES.labels(
                pool=POOL, outcome=outcome
            )._value.get()
        found["fallback"] = metrics.AFFINITY_FALLBACKS.labels(pool=POOL)._value.get()
        return found

    before = outcomes()
    threads = [
        threading.Thread(target=conversation, args=(c,), daemon=True)
        for c in range(args.conversations)
    ]
    started = time.time()
    for t in threads:
        t.start()
    first_done.wait()
    hog_id = f"aff-{run_id}-hog"
    if mode.endswith("-sat"):
        # the worker that served conversation 0 gets a long job on its only slot
        with lock:
            target = next(r["worker"] for r in rows if r["conv"] == 0)
        hog = protocol.Job(
            job_id=hog_id,
            messages=[{"role": "user", "content": "Write a very long story."}],
            params={"max_tokens": 100000, "temperature": 0.7, "ignore_eos": True},
            enqueued_at=time.time(),
            deadline=time.time() + 300,
        )
        client.job_enqueue(pool=POOL, job=hog, worker=target)
        while not any(
            e.type == "token" for e in client.generation_events(job_id=hog_id)
        ):
            time.sleep(0.01)
    for t in threads:
        t.join()
    wall = time.time() - started
    client.job_cancel(job_id=hog_id)
    for w in workers:
        w.stop()
    after = outcomes()
    follow = [r for r in rows if r["turn"] >= args.history]
    ttfts = [float(r["ttft_ms"]) for r in follow]
    prompt = sum(r["prompt"] for r in follow)
    cached = sum(r["cached"] for r in follow)
    redis_sync().delete(keys.worker_queues_key(POOL))
    return {
        "mode": mode,
        "n": len(follow),
        "ttft_p50": pct(ttfts, 50),
        "ttft_p90": pct(ttfts, 90),
        "hit_rate": cached / prompt if prompt else 0.0,
        "prompt_mean": prompt / len(follow) if follow else 0,
        "wall_s": wall,
        "routes": {k: int(after[k] - before[k]) for k in after},
    }


def main() -> None:
    parser = option_parser(
        conversations=2,
        turns=10,
        history=8,
        question_words=40,
        max_tokens=8,
        threads=1,
        slots=1,
        n_ctx=4096,
        prompt_cache_mb=64,
        think_s=0.0,
        saturate=False,
        verbose=False,
        procs=False,
    )
    parser.add_argument("--engine", choices=["llamacpp", "vllm"], default="llamacpp")
    parser.add_argument("--model-dir", default=str(ROOT / ".var/models/smollm2-hf"))
    args = parser.parse_args()
    django_start({"LOG_LEVEL": "WARNING"})
    load = os.getloadavg()[0]
    modes = ["off", "on"] + (["off-sat", "on-sat"] if args.saturate else [])
    results = {}
    procs = worker_procs(args) if args.procs else []
    for mode in modes:
        try:
            results[mode] = run_mode(args, mode)
        except BaseException:
            for p in procs:
                p.terminate()
            raise
        r = results[mode]
        print(
            f"{mode:8} follow-ups={r['n']:3} TTFT p50 {r['ttft_p50']:7.0f} ms "
            f"p90 {r['ttft_p90']:7.0f} ms  prefix hits {r['hit_rate']:5.1%} "
            f"(prompt {r['prompt_mean']:.0f} tok)  wall {r['wall_s']:.1f} s  "
            f"routes {r['routes']}",
            flush=True,
        )
    for p in procs:
        p.terminate()
        p.wait(timeout=60)
    params = (
        f"{args.engine}, 2 workers x {args.slots} slot, {args.conversations} "
        f"conversations x {args.turns} turns, think 0-{args.think_s} s, follow-ups with >= {args.history} "
        f"turns of history, {args.threads} thread(s)/worker, prompt cache "
        f"{args.prompt_cache_mb} MiB, load {load:.1f}"
    )
    speedup = results["off"]["ttft_p50"] / max(1.0, results["on"]["ttft_p50"])
    print(f"follow-up TTFT p50: {speedup:.2f}x better with affinity ({params})")
    for mode, r in results.items():
        bench_record(
            bench="affinity",
            metric=f"follow-up TTFT p50 ({mode})",
            value=round(r["ttft_p50"]),
            unit="ms",
            params=params,
        )
        bench_record(
            bench="affinity",
            metric=f"prefix-cache hit rate ({mode})",
            value=round(100 * r["hit_rate"], 1),
            unit="%",
            params=params,
        )
    bench_record(
        bench="affinity",
        metric="follow-up TTFT p50 off/on",
        value=round(speedup, 2),
        unit="x",
        params=params,
        goal=">= 1.5",
    )
    if args.saturate:
        sat = results["off-sat"]["ttft_p50"] / max(1.0, results["on-sat"]["ttft_p50"])
        print(f"one worker saturated: off/on TTFT p50 {sat:.2f}x")
        bench_record(
            bench="affinity",
            metric="follow-up TTFT p50 off/on, one worker saturated",
            value=round(sat, 2),
            unit="x",
            params=params,
            goal=">= 1 (no worse)",
        )


if __name__ == "__main__":
    main()
