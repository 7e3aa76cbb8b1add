"""SSE fan-out: N concurrent chat streams through one daphne, and through two behind
HAProxy (deploy/haproxy.cfg).

    .venv/bin/python bench/sse_fanout.py [--streams 250 500 1000 2000]
        [--targets one proxy] [--tokens 200] [--delay-ms 20] [--coalesce-ms 50]

The default (200 streams, one daphne) is the quick run of ``make bench``; the full
figures come from ``--streams 250 500 1000 2000 --targets one proxy``.

Runs on the dev services (`make migrate` first). For each target and N:

1. start the web process(es) (and HAProxy), sign in a bench user over HTTP and POST N
   messages (the real turn path); the pool looks served (a heartbeat) but no worker
   runs yet, so every job waits in the queue;
2. open N SSE streams (a light raw-socket client: headers, chunked decoding, frame
   boundaries; token payloads are not JSON-decoded) and wait until all are open;
3. start one scripted worker (``--concurrency N``, ``--tokens`` tokens ``--delay-ms``
   apart): every generation starts at once and each stream reads to its ``done``.

Figures:

- completed streams (a ``done`` frame) of N;
- TTFT added by our path: the first token's Redis entry time (the entry id is the
  XADD's millisecond clock) to the client receiving its frame, p50/p99 ms; the same
  for every frame ("relay latency");
- p99 gap between two token frames of one stream at the client (ms; the engine emits
  every ``--delay-ms`` and the relay coalesces for SSE_COALESCE_MS or longer under
  load, so anything above is worker, relay or client lag: the relay latency tells the
  relay's share);
- done lag: the last token frame to the ``done`` frame (p50/p99 ms), the settlement
  (usage record, quota, the stored answer); every stream ends at once here, so this is
  a burst of N settlements;
- web CPU (cores busy while streaming, per 1,000 streams; and per frame sent) and RSS
  added by the open streams (MiB per 1,000 streams), summed over the web processes;
  HAProxy's own CPU and RSS are not counted.

The client, the worker, the web processes and Redis share the machine, so on a small
or busy one the figures are upper bounds of the relay's cost.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import statistics
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.boot import django_start, option_parser  # noqa: E402
from bench.procstat import proc_cpu_s, proc_rss_mib, proc_threads  # noqa: E402
from bench.record import figures_record, pct  # noqa: E402
from bench.sse_wire import StreamStats, stream_follow  # noqa: E402

POOL = "ssebench"


def bench_setup(password: str) -> None:
    """The bench user, on a plan with no token limits, allowed the bench pool only."""
    from bench.users import plan_user, pool_upsert

    pool = pool_upsert(POOL, model="scripted-1", queue_threshold=1_000_000)
    plan_user("ssebench", plan="ssebench", pools=[pool], password=password)


async def post_turns(base: str, password: str, n: int) -> tuple[str, list[str]]:
    """Sign in and POST ``n`` messages; return the Cookie header and stream paths."""
    import httpx

    from bench.chat import login_form

    async with httpx.AsyncClient(base_url=base, timeout=120) as client:
        await client.get("/login/")
        form = login_form(client.cookies, username="ssebench", password=password)
        await client.post("/login/", data=form)
        token = client.cookies["csrftoken"]
        gate = asyncio.Semaphore(8)

        async def one(i: int) -> str:
            async with gate:
                r = await client.post(
                    "/c/messages/",
                    data={"content": f"Stream number {i}, please."},
                    headers={"X-CSRFToken": token},
                )
                r.raise_for_status()
                return r.json()["assistant_message"]["stream_url"]

        paths = await asyncio.gather(*(one(i) for i in range(n)))
        cookie = "; ".join(f"{k}={v}" for k, v in client.cookies.items())
    return cookie, list(paths)


@contextmanager
def _profiled_web(env: dict, out: str) -> Iterator:
    """One daphne under cProfile (``python -m cProfile -o out``); the profile is
    written when daphne exits on SIGTERM. Read it with ``python -m pstats out``."""
    from bench.procs import profiled
    from tests.stack import (
        ASGI_APP,
        Web,
        free_port,
        process_start,
        processes_stop,
        web_wait,
    )

    port = free_port()
    daphne = Path(sys.executable).parent / "daphne"
    argv = profiled([daphne, "-b", "127.0.0.1", "-p", str(port), ASGI_APP], out)
    web = process_start(argv, env, "daphne")
    base = f"http://127.0.0.1:{port}"
    try:
        web_wait(base, web)
        yield Web(base=base, process=web)
    finally:
        processes_stop([web])


def run_one(target: str, n: int, args: argparse.Namespace) -> dict:
    """Run the fan-out of ``n`` streams through ``target`` (``one`` or ``proxy``)."""
    from inference import keys
    from inference.connections import redis_sync
    from tests.proxy import haproxy_process
    from tests.stack import stack_env, web_process, worker_processes

    env = stack_env(for_tests=False)
    password = "ssebench-pass-123"
    bench_setup(password)
    redis = redis_sync()
    with ExitStack() as stack:
        if args.profile:
            webs = [stack.enter_context(_profiled_web(env, args.profile))]
        else:
            webs = [stack.enter_context(web_process(env))]
        if target == "proxy":
            webs.append(stack.enter_context(web_process(env)))
            proxy = stack.enter_context(haproxy_process([w.base[7:] for w in webs]))
            base = proxy.base
        else:
            base = webs[0].base
        pids = [w.process.pid for w in webs]
        # The pool looks served (the gateway admits only to a served pool) while its
        # jobs wait: every stream is open before the first token.
        fake = "sse-bench-hold"
        redis.zadd(keys.workers_key(POOL), {fake: time.time() + 3600})
        cookie, paths = asyncio.run(post_turns(base, password, n))
        host, port = base[7:].split(":")
        all_stats = [StreamStats() for _ in paths]
        rss_before = sum(proc_rss_mib(p) for p in pids)

        async def fan_out() -> dict:
            opened = [asyncio.Event() for _ in paths]
            tasks = [
                asyncio.create_task(
                    stream_follow(host, int(port), path, cookie, stats, ev)
                )
                for path, stats, ev in zip(paths, all_stats, opened, strict=True)
            ]
            deadline = time.monotonic() + 120
            while sum(ev.is_set() for ev in opened) < n:
                if time.monotonic() > deadline or all(t.done() for t in tasks):
                    break
                await asyncio.sleep(0.1)
            rss_open = sum(proc_rss_mib(p) for p in pids)
            worker = [
                "--pool", POOL, "--engine", "scripted", "--concurrency", str(n),
                "--delay-ms", str(args.delay_ms), "--cycle",
                "--script-text", "tok " * 8,
            ]  # fmt: skip
            peak = rss_open
            # Without the stand-in heartbeat, start-up waits for the real worker; the
            # watchdog's no-worker grace (600 s here) covers the gap.
            redis.zrem(keys.workers_key(POOL), fake)
            with worker_processes([worker], env) as procs:
                cpu0, t0 = sum(proc_cpu_s(p) for p in pids), time.monotonic()
                worker_cpu0 = proc_cpu_s(procs[0].pid)
                client_cpu0 = time.process_time()
                pending = set(tasks)
                threads = clients = 0
                while pending:
                    _, pending = await asyncio.wait(pending, timeout=0.5)
                    peak = max(peak, sum(proc_rss_mib(p) for p in pids))
                    threads = max(threads, sum(proc_threads(p) for p in pids))
                    clients = max(clients, redis.info("clients")["connected_clients"])
                worker_cpu = proc_cpu_s(procs[0].pid) - worker_cpu0
                client_cpu = time.process_time() - client_cpu0
            cpu = sum(proc_cpu_s(p) for p in pids) - cpu0
            return {
                "rss_open": rss_open,
                "rss_peak": peak,
                "cpu_s": cpu,
                "wall_s": time.monotonic() - t0,
                "threads": threads,
                "redis_clients": clients,
                "worker_cpu_s": worker_cpu,
                "client_cpu_s": client_cpu,
            }

        run = asyncio.run(fan_out())
        waiting = redis.xlen(keys.queue_key(POOL))
        warnings = _web_warnings(webs)
    done = [s for s in all_stats if s.done]
    errors: dict[str, int] = {}
    for s in all_stats:
        if not s.done:
            errors[s.error] = errors.get(s.error, 0) + 1
    first = [s.first_token_lag_ms for s in done if s.first_token_lag_ms is not None]
    lags = [lag for s in done for lag in s.lags_ms]
    gaps = [gap for s in done for gap in s.gaps_ms]
    done_lags = [s.done_lag_ms for s in done if s.done_lag_ms is not None]
    per_k = 1000 / n
    return {
        "target": target,
        "n": n,
        "completed": len(done),
        "errors": errors,
        "ttft_added_p50": pct(first, 50),
        "ttft_added_p99": pct(first, 99),
        "relay_p50": pct(lags, 50),
        "relay_p99": pct(lags, 99),
        "gap_p50": pct(gaps, 50),
        "gap_p99": pct(gaps, 99),
        "done_lag_p50": pct(done_lags, 50),
        "done_lag_p99": pct(done_lags, 99),
        "frames": statistics.mean([s.frames for s in done]) if done else 0,
        "cpu_us_per_frame": run["cpu_s"]
        * 1e6
        / max(1, sum(s.frames for s in all_stats)),
        "cores": run["cpu_s"] / run["wall_s"],
        "cores_per_k": run["cpu_s"] / run["wall_s"] * per_k,
        "cpu_ms_per_stream": run["cpu_s"] * 1000 / n,
        "rss_open_per_k": (run["rss_open"] - rss_before) * per_k,
        "rss_peak_per_k": (run["rss_peak"] - rss_before) * per_k,
        "wall_s": run["wall_s"],
        "threads": run["threads"],
        "worker_cores": run["worker_cpu_s"] / run["wall_s"],
        "client_cores": run["client_cpu_s"] / run["wall_s"],
        "redis_clients": run["redis_clients"],
        "left_waiting": waiting,
        "warnings": warnings,
    }


def _web_warnings(webs: list) -> dict[str, int]:
    """The web processes' WARNING/ERROR log lines so far, counted (digits folded,
    cut at 200 characters): why a stream ended with an error frame, in the web's
    words. Read before the processes stop (their stderr files close with them)."""
    import re

    counts: dict[str, int] = {}
    for web in webs:
        web.process.stderr.flush()
        web.process.stderr.seek(0)
        for line in web.process.stderr.read().decode(errors="replace").splitlines():
            if "WARNING" in line or "ERROR" in line or "Error" in line:
                folded = re.sub(r"\d+", "N", line)[:200]
                counts[folded] = counts.get(folded, 0) + 1
    return counts


def main() -> None:
    parser = option_parser(
        __doc__.split("\n\n")[0],
        streams=[200],
        targets=["one"],
        tokens=200,
        delay_ms=20.0,
    )
    parser.add_argument(
        "--coalesce-ms",
        type=float,
        default=None,
        help="SSE_COALESCE_MS of the web processes (default: the setting's)",
    )
    parser.add_argument(
        "--profile",
        metavar="FILE",
        help="run the (one) daphne under cProfile and write its profile to FILE",
    )
    args = parser.parse_args()
    if args.coalesce_ms is not None:
        os.environ["SSE_COALESCE_MS"] = str(args.coalesce_ms)
    # One socket per stream on each side (client, daphne, HAProxy).
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    django_start(
        {
            "INFERENCE_DEFAULT_POOL": POOL,
            "CHAT_MAX_TOKENS": str(args.tokens),
            "CHAT_MESSAGE_RATE": "1000000/m",
            "SAFETY_INPUT_ENABLED": "0",
            "CHAT_BACKGROUND_JOBS": "0",
            "GATEWAY_QUEUE_THRESHOLD": "1000000",
            "GATEWAY_CACHE_ENABLED": "0",
            "GATEWAY_SEMANTIC_CACHE_ENABLED": "0",
            # jobs wait while the streams open; no watchdog may end them meanwhile
            "INFERENCE_QUEUE_TIMEOUT_S": "600",
            "INFERENCE_NO_WORKER_GRACE_S": "600",
            "LOG_LEVEL": "WARNING",
        }
    )
    rows = [run_one(t, n, args) for n in args.streams for t in args.targets]
    print(
        f"\n{args.tokens} tokens per stream, {args.delay_ms:g} ms apart; "
        f"{os.cpu_count()} cores shared by client, worker, web and Redis\n"
    )
    head = (
        "target  streams  done  TTFT+ p50/p99 ms  relay p50/p99 ms  gap p50/p99 ms"
        "  frames  web cores  cores/1k  CPU ms/stream  CPU us/frame  MiB/1k open/peak"
    )
    print(head)
    for r in rows:
        print(
            f"{r['target']:6s}  {r['n']:7d}  {r['completed']:4d}  "
            f"{r['ttft_added_p50']:7.1f}/{r['ttft_added_p99']:7.1f}  "
            f"{r['relay_p50']:7.1f}/{r['relay_p99']:7.1f}  "
            f"{r['gap_p50']:6.1f}/{r['gap_p99']:6.1f}  {r['frames']:6.1f}  "
            f"{r['cores']:9.2f}  {r['cores_per_k']:8.2f}  "
            f"{r['cpu_ms_per_stream']:13.1f}  {r['cpu_us_per_frame']:12.0f}  "
            f"{r['rss_open_per_k']:6.1f}/{r['rss_peak_per_k']:6.1f}"
        )
        print(
            f"        streaming {r['wall_s']:.1f} s; web threads at peak "
            f"{r['threads']}; done lag p50/p99 {r['done_lag_p50']:.0f}/"
            f"{r['done_lag_p99']:.0f} ms; Redis clients at peak {r['redis_clients']} (all "
            f"processes); queue entries left {r['left_waiting']}; cores busy: "
            f"worker {r['worker_cores']:.2f}, client {r['client_cores']:.2f}, load "
            f"average {os.getloadavg()[0]:.1f}"
        )
        if r["errors"]:
            print(f"        not completed: {r['errors']}")
        for line, count in sorted(r["warnings"].items(), key=lambda kv: -kv[1])[:10]:
            print(f"        web log x{count}: {line}")
        _record(r, args)


def _record(r: dict, args: argparse.Namespace) -> None:
    """The headline figures of one row, for ``make bench``'s table."""
    params = (
        f"N={r['n']}, {'one daphne' if r['target'] == 'one' else 'two behind HAProxy'}"
        f", {args.tokens} tokens {args.delay_ms:g} ms apart"
        f", load {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
    )
    figures = [
        ("streams completed", r["completed"], "streams", f"= {r['n']}"),
        ("token frame gap p99", r["gap_p99"], "ms", "< 250 ms"),
        ("relay latency p99", r["relay_p99"], "ms", ""),
        ("done lag p99 (settlement burst)", r["done_lag_p99"], "ms", ""),
        ("TTFT added p50", r["ttft_added_p50"], "ms", ""),
        ("TTFT added p99", r["ttft_added_p99"], "ms", ""),
        ("web cores per 1,000 streams", r["cores_per_k"], "cores", ""),
        ("web CPU per frame", r["cpu_us_per_frame"], "us", ""),
        ("web RSS per 1,000 open streams", r["rss_open_per_k"], "MiB", ""),
    ]
    figures_record(bench="sse_fanout", params=params, figures=figures)


if __name__ == "__main__":
    main()
