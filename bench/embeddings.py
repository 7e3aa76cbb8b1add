"""Embeddings in the inference tier: what the web process pays for memory, and what the
embedding worker's batching buys.

    .venv/bin/python bench/embeddings.py [--turns 100] [--cold-starts 5] [--seconds 3] [--trials 3]

Runs on a throwaway database (``<name>_bench_embeddings`` on the PostgreSQL server of
DATABASE_URL, or of ``.var/services.env``: created, migrated, dropped at the end) and
Redis database 14 of REDIS_URL's server (flushed before and after), so nothing the dev
services hold is touched. Processes as deployed (tests/stack.py): uvicorn, a scripted
chat worker (``--engine scripted --delay-ms 1``: the model is not what is measured) and
an embedding worker (``--engine sentence-transformers``, all-MiniLM-L6-v2 on CPU).

1. Turns with memory on: a user with 5 facts and a ready document sends ``--turns``
   messages about them (each in a new conversation: POST, then the SSE stream to
   ``done``). Prints
   - the web process's RSS (MB = 2^20 bytes, /proc VmRSS; peak VmHWM) at start and
     after the turns, and whether torch / sentence_transformers are in its sys.modules
     (the web process runs tests.asgi_probe);
   - POST latency (ms, client: request sent -> 201 received): warm = turns 2.. of one
     web process, p50/p99; cold = the first turn POST after a fresh web process start (login
     first), one per ``--cold-starts`` restart, with the embedding and chat workers
     already running;
   - how many answers used memory (citations stored, memory not unavailable).
   Goals: RSS <= 200 MB; cold p50 <= 2x warm p50.
2. Embedding throughput (texts/s) at 1, 8 and 32 concurrent callers (asyncio tasks,
   each one text per request, like a turn's question), ``--trials`` runs of
   ``--seconds`` each after a short warm-up, median printed: batched (default EMBEDDING_GATHER_MS / EMBEDDING_MAX_BATCH) vs one by
   one (``--max-batch 1``). Goal: batched >= 3x at 32.
3. The gathering window's cost to a lone request: latency p50/p99 (ms, enqueue ->
   vectors, client side) of 100 sequential requests with ``--gather-ms`` 0, 2 (the
   default) and 10.

The machine's other load is not controlled: on a shared 2-core box, read the figures as
orders of magnitude and compare within one run.
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.boot import ROOT, django_start, option_parser  # noqa: E402
from bench.corpus import FACTS, QUESTIONS, docstrings  # noqa: E402
from bench.procstat import proc_peak_rss_mib, proc_rss_mib  # noqa: E402
from bench.record import bench_record, figures_record, pct  # noqa: E402

BENCH_REDIS_DB = 14
CHAT_POOL = "bench"
CHAT_WORKER = ["--pool", CHAT_POOL, "--engine", "scripted", "--delay-ms", "1"]
EMBED_WORKER = ["--engine", "sentence-transformers"]
WEB_APP = "tests.asgi_probe:application"
PASSWORD = "bench-pass-123"
MODEL_MODULES = ("torch", "sentence_transformers")


def throwaway_services() -> tuple[str, str, str]:
    """Create an empty database next to DATABASE_URL's and point this process (and the
    ones it starts) at it and at Redis db 14; return (admin URL, db name, Redis URL)."""
    import environ
    import psycopg

    from inference.connections import redis_sync  # plain or Sentinel URL

    env = environ.Env()
    services = ROOT / ".var" / "services.env"
    if services.exists():
        env.read_env(str(services), overwrite=False)
    admin_url = env("DATABASE_URL")
    parts = urlsplit(admin_url)
    name = parts.path.lstrip("/") + "_bench_embeddings"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    redis_url = env("REDIS_URL").rsplit("/", 1)[0] + f"/{BENCH_REDIS_DB}"
    os.environ["DATABASE_URL"] = urlunsplit(parts._replace(path="/" + name))
    os.environ["REDIS_URL"] = redis_url
    os.environ["CELERY_BROKER_URL"] = redis_url
    # after the variables: redis_sync reads settings (its pool size), which then load
    # with what the environment says; before them, this process watched db 0 for the
    # workers' heartbeats while they wrote to db 14 ("no live worker after 120 s")
    redis_sync(redis_url).flushdb()
    return admin_url, name, redis_url


def throwaway_drop(admin_url: str, name: str, redis_url: str) -> None:
    """Drop the bench database and flush the bench Redis db."""
    import psycopg
    from django.db import connections

    from inference.connections import redis_sync

    for connection in connections.all():
        if getattr(connection, "pool", None) is not None:
            connection.close_pool()
        connection.close()
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    redis_sync(redis_url).flushdb()


def bench_user() -> Any:
    """A user on an unlimited plan for the bench pool, with memory: facts, a document.

    Needs a live embedding worker (facts and chunks are embedded by it).
    """
    from bench.users import memory_add, plan_user, pool_upsert

    pool = pool_upsert(CHAT_POOL, model="scripted-1")
    user = plan_user("bench", plan="bench", pools=[pool], password=PASSWORD)
    memory_add(user)
    return user


def bench_turns(args: argparse.Namespace) -> None:
    import httpx

    from bench.chat import login, turn_read
    from conversations.models import Message
    from memory.models import Citation
    from tests.asgi_probe import PROBE_PATH
    from tests.stack import stack_env, web_process, worker_processes

    env = stack_env(for_tests=False)
    with worker_processes([CHAT_WORKER, EMBED_WORKER], env):
        bench_user()
        cold, warm, ids = [], [], []
        start_rss = end_rss = (0.0, 0.0)
        modules: list[str] = []
        for start in range(args.cold_starts):
            last = start == args.cold_starts - 1
            with web_process(env, app=WEB_APP) as web:
                pid = web.process.pid
                with httpx.Client(base_url=web.base, timeout=60) as http:
                    login(http, username="bench", password=PASSWORD)
                    if last:
                        start_rss = (proc_rss_mib(pid), proc_peak_rss_mib(pid))
                    for i in range(args.turns if last else 1):
                        read = turn_read(http, QUESTIONS[i % len(QUESTIONS)])
                        if not read.end:
                            raise RuntimeError("the stream ended without done/error")
                        post_ms = (read.posted - read.sent) * 1000
                        (cold if i == 0 else warm).append(post_ms)
                        ids.append(read.body["assistant_message"]["id"])
                    if last:
                        end_rss = (proc_rss_mib(pid), proc_peak_rss_mib(pid))
                        modules = http.get(PROBE_PATH).json()["modules"]
            print(
                f"  web process start {start + 1}: first turn POST {cold[-1]:7.1f} ms"
            )
    answers = Message.objects.filter(id__in=ids)
    complete = answers.filter(status=Message.Status.COMPLETE).count()
    with_memory = (
        answers.filter(memory_unavailable=False, citations__isnull=False)
        .distinct()
        .count()
    )
    citations = Citation.objects.filter(message_id__in=ids).count()
    loaded = sorted({m.split(".", 1)[0] for m in modules} & set(MODEL_MODULES))
    print()
    print(
        f"web process RSS: {start_rss[0]:.0f} MB after login, "
        f"{end_rss[0]:.0f} MB after {args.turns} turns with memory on "
        f"(peak {end_rss[1]:.0f} MB)   goal <= 200 MB"
    )
    print(f"model modules in the web process's sys.modules: {loaded or 'none'}")
    print(
        f"answers: {complete}/{len(ids)} complete, {with_memory} with memory used "
        f"(citations stored, {citations} in all)"
    )
    print(
        f"POST latency warm (turns 2..{args.turns}, n={len(warm)}): "
        f"p50 {pct(warm, 50):.1f} ms  p99 {pct(warm, 99):.1f} ms"
    )
    ratio = statistics.median(cold) / pct(warm, 50)
    print(
        f"POST latency cold (first turn after a web process start, n={len(cold)}): "
        f"p50 {statistics.median(cold):.1f} ms  max {max(cold):.1f} ms   "
        f"cold/warm p50 {ratio:.2f}x   goal <= 2x"
    )
    shape = f"{args.turns} turns, {args.cold_starts} cold starts, memory on"
    figures = [
        ("web RSS after turns", end_rss[0], "MB", "<= 200 MB"),
        ("POST warm p50", pct(warm, 50), "ms", ""),
        ("POST warm p99", pct(warm, 99), "ms", ""),
        ("POST cold p50", statistics.median(cold), "ms", ""),
        ("POST cold/warm p50", ratio, "x", "<= 2x"),
        ("answers with memory used", with_memory, f"of {len(ids)}", ""),
    ]
    figures_record(bench="embeddings", params=shape, figures=figures)


async def _callers(
    pool: str, texts: list[str], concurrency: int, seconds: float
) -> tuple[int, float, list[float]]:
    """``concurrency`` tasks embed one text per request on ``pool`` for ``seconds``;
    return (texts embedded, elapsed s, request latencies in ms)."""
    from inference.embeddings import aembed_texts

    latencies: list[float] = []
    stop_at = time.perf_counter() + seconds

    async def caller(k: int) -> int:
        done = 0
        while time.perf_counter() < stop_at:
            text = texts[(k * 7919 + done) % len(texts)]
            sent = time.perf_counter()
            await aembed_texts([text], pool=pool, timeout_s=30)
            latencies.append((time.perf_counter() - sent) * 1000)
            done += 1
        return done

    begun = time.perf_counter()
    counts = await asyncio.gather(*(caller(k) for k in range(concurrency)))
    return sum(counts), time.perf_counter() - begun, latencies


def sample_texts(limit: int = 2000) -> list[str]:
    """Short real English texts (a turn's question is one): the docstrings of the
    installed Django's functions and classes longer than 30 characters, on one line,
    cut at 300 characters."""
    kinds = (ast.FunctionDef, ast.ClassDef)
    texts = docstrings(limit, min_chars=31, nodes=kinds)
    return [" ".join(doc.split())[:300] for doc in texts]


def bench_embedding_worker(args: argparse.Namespace) -> None:
    from django.conf import settings

    from tests.stack import stack_env, worker_processes

    env = stack_env(for_tests=False)
    texts = sample_texts()
    default = f"gather_ms={settings.EMBEDDING_GATHER_MS:g} max_batch={settings.EMBEDDING_MAX_BATCH}"
    levels = [1, 8, 32]

    def worker(pool: str, *options: str) -> list[list[str]]:
        return [[*EMBED_WORKER, "--pool", pool, *options]]

    throughput: dict[str, dict[int, tuple[float, float]]] = {}
    lone: dict[str, list[float]] = {}
    configs = [
        (f"batched ({default})", "bench-emb-batched", (), True),
        ("one by one (max_batch=1)", "bench-emb-single", ("--max-batch", "1"), True),
        ("gather_ms=0", "bench-emb-g0", ("--gather-ms", "0"), False),
        ("gather_ms=10", "bench-emb-g10", ("--gather-ms", "10"), False),
    ]
    print()
    print(f"embedding worker: all-MiniLM-L6-v2, CPU, {os.cpu_count()} cores")
    for label, pool, options, sweep in configs:
        with worker_processes(worker(pool, *options), env):
            asyncio.run(_callers(pool, texts, 8, 1.0))  # warm-up
            if sweep:
                throughput[label] = {}
                for concurrency in levels:
                    rates, latencies = [], []
                    for _trial in range(args.trials):
                        n, elapsed, lat = asyncio.run(
                            _callers(pool, texts, concurrency, args.seconds)
                        )
                        rates.append(n / elapsed)
                        latencies += lat
                    rate = statistics.median(rates)
                    throughput[label][concurrency] = (rate, pct(latencies, 50))
                    print(
                        f"  {label:34s} {concurrency:2d} concurrent: {rate:7.1f} texts/s "
                        f"(trials {', '.join(f'{r:.0f}' for r in rates)})  "
                        f"request p50 {pct(latencies, 50):6.1f} ms"
                    )
            if sweep and options:
                continue  # max_batch=1: no gathering to measure
            lone[label] = asyncio.run(_lone(pool, texts, args.lone_requests))
    print()
    print("throughput (texts/s), one text per request:")
    batched, single = (throughput[c[0]] for c in configs[:2])
    print(f"  {'concurrent':>10s}  {'batched':>9s}  {'one by one':>10s}  speed-up")
    for concurrency in levels:
        b, s = batched[concurrency][0], single[concurrency][0]
        print(f"  {concurrency:10d}  {b:9.1f}  {s:10.1f}  {b / s:7.2f}x")
        shape = f"{concurrency} concurrent, {args.trials}x{args.seconds:g} s"
        bench_record(
            bench="embeddings",
            metric="batched throughput",
            value=b,
            unit="texts/s",
            params=shape,
        )
        bench_record(
            bench="embeddings",
            metric="batched / one by one",
            value=b / s,
            unit="x",
            params=shape,
            goal=">= 3x at 32" if concurrency == 32 else "",
        )
    print("  goal: batched >= 3x one by one at 32")
    print()
    print(f"lone request latency (n={args.lone_requests} sequential, client side):")
    for label in ("gather_ms=0", configs[0][0], "gather_ms=10"):
        values = lone[label]
        print(
            f"  {label:34s} p50 {pct(values, 50):6.1f} ms  p99 {pct(values, 99):6.1f} ms"
        )
        bench_record(
            bench="embeddings",
            metric="lone request p50",
            value=pct(values, 50),
            unit="ms",
            params=f"{label}, n={args.lone_requests}",
        )


async def _lone(pool: str, texts: list[str], n: int) -> list[float]:
    """Latencies (ms) of ``n`` sequential one-text requests on ``pool``."""
    from inference.embeddings import aembed_texts

    out = []
    for i in range(n):
        sent = time.perf_counter()
        await aembed_texts([texts[i % len(texts)]], pool=pool, timeout_s=30)
        out.append((time.perf_counter() - sent) * 1000)
    return out


def main() -> None:
    parser = option_parser(
        turns=100,
        cold_starts=5,
        seconds=3.0,
        trials=3,
        lone_requests=100,
        skip_turns=False,
        skip_worker=False,
    )
    args = parser.parse_args()
    os.environ["INFERENCE_DEFAULT_POOL"] = CHAT_POOL  # a pool only this run serves
    os.environ["LOG_LEVEL"] = "WARNING"
    os.environ["CHAT_MESSAGE_RATE"] = "100000/m"
    os.environ["LOGIN_RATE"] = "1000/m"
    os.environ["CHAT_BACKGROUND_JOBS"] = "0"  # titles, summaries, facts: not measured
    admin_url, name, redis_url = throwaway_services()
    try:
        from django.core.management import call_command

        django_start()
        call_command("migrate", verbosity=0)
        print(f"database {name} (throwaway), Redis db {BENCH_REDIS_DB}")
        if not args.skip_turns:
            print(f"turns with memory on ({len(FACTS)} facts, 1 document):")
            bench_turns(args)
        if not args.skip_worker:
            bench_embedding_worker(args)
    finally:
        throwaway_drop(admin_url, name, redis_url)


if __name__ == "__main__":
    main()
