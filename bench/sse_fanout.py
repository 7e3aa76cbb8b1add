"""SSE fan-out per core: N concurrent chat streams through one web process pinned to
one core, everything else (client, scripted worker, Redis, PostgreSQL) on another.

    .venv/bin/python bench/sse_fanout.py [--streams 200 1000] [--ramp]
        [--tokens 200] [--delay-ms 20] [--server uvicorn|daphne|daphne-uvloop] [--nice -10]
        [--profile FILE] [--py-spy FILE [--py-spy-phase tokens|done]]

For each N: start the web process pinned to the web core, sign in a bench user and
POST N messages (the real turn path; the pool looks served while its jobs wait), open
N SSE streams (a light raw-socket client, :mod:`bench.sse_wire`) and wait until all are
open, then run the tick-batched scripted worker (:mod:`bench.sse_load`): every stream's
token of one tick in one Redis round trip, ``--tokens`` ticks ``--delay-ms`` apart,
then every answer ends in the same tick.

Figures (each says how it was pinned):

- web CPU per token frame: the web process's own CPU (/proc, sampled every 0.1 s) from
  the first token tick to the last token frame the client read, over the token frames
  read; the settlement's CPU per answer apart (from then to the last ``done``; with a
  lagging web process some answers settle while others still stream);
- frame gap p99 at the client (ms) and relay latency (the token's Redis entry time to
  the frame's read); done lag (the last token frame to the ``done`` frame, p50/p99 ms:
  N answers ending together);
- the web process's threads at peak, per open stream;
- the cores' use and interrupts (/proc/stat: all processes) and the load side's own
  CPU by part (client, worker, Redis, PostgreSQL) while tokens stream and in all; a
  step that missed the gap with its load core saturated gets no ceiling
  (:func:`bench.sse_report.step_verdict`).

``--ramp`` doubles N from the first ``--streams`` until a step fails, then bisects
between the last pass and the first failure to 200 streams or 10 % (at most
``--ramp-steps`` steps, about 45 s each at 2,000 streams) and reports the most streams
that passed and why the step above failed (:func:`bench.sse_report.ramp_next`). Where
the load core saturates before the web's does, the streams-per-core row is derived
instead, labelled so
(:func:`bench.sse_report.per_core_derived`: N over the web core's use at the largest
N the load side did not limit). :func:`hot_path_rows` is the benchmark table's call.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import resource
import sys
import time
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.boot import django_start, option_parser  # noqa: E402
from bench.procstat import proc_cpu_s, proc_rss_mib, proc_threads  # noqa: E402
from bench.record import bench_record, pct  # noqa: E402
from bench.sse_load import (  # noqa: E402
    ALL_CORES,
    CoreUse,
    Phases,
    batched_worker,
    cores_pick,
    load_side_cpu_s,
    loop_run,
    pin_tree,
    pinned,
    service_pids,
)
from bench.sse_report import (  # noqa: E402
    LOAD_SATURATED,
    per_core_derived,
    pinning,
    py_spy_start,
    ramp_next,
    ramp_result,
    report,
    step_verdict,
)
from bench.sse_web import web_server  # noqa: E402
from bench.sse_wire import StreamStats, stream_follow  # noqa: E402

POOL = "ssebench"
ENV = {
    "INFERENCE_DEFAULT_POOL": POOL,
    "CHAT_MESSAGE_RATE": "1000000/m",
    "SAFETY_INPUT_ENABLED": "0",
    # the relay's own cost: output moderation (its own benchmark) off
    "SAFETY_OUTPUT_ENABLED": "0",
    "CHAT_BACKGROUND_JOBS": "0",
    "GATEWAY_QUEUE_THRESHOLD": "1000000",
    "GATEWAY_CACHE_ENABLED": "0",
    "GATEWAY_SEMANTIC_CACHE_ENABLED": "0",
    # jobs wait while the streams open; no watchdog may end them meanwhile
    "INFERENCE_QUEUE_TIMEOUT_S": "600",
    "INFERENCE_NO_WORKER_GRACE_S": "600",
    "LOG_LEVEL": "WARNING",
}


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


def _worker_main(out: multiprocessing.Queue, kwargs: dict, loop: str) -> None:
    out.put(loop_run(batched_worker(**kwargs), loop))


async def fan_out(
    n: int, args: argparse.Namespace, web_pid: int, host: str, port: int,
    cookie: str, paths: list[str], load_pids: dict[str, int],
) -> dict:  # fmt: skip
    """Open the streams, run the worker, read every stream to its end."""
    stats = [StreamStats() for _ in paths]
    opened = [asyncio.Event() for _ in paths]
    tasks = [
        asyncio.create_task(stream_follow(host, port, p, cookie, s, ev))
        for p, s, ev in zip(paths, stats, opened, strict=True)
    ]
    deadline = time.monotonic() + 120
    while sum(ev.is_set() for ev in opened) < n and time.monotonic() < deadline:
        if all(t.done() for t in tasks):
            break
        await asyncio.sleep(0.1)
    rss_open = proc_rss_mib(web_pid)
    ctx = multiprocessing.get_context("fork")
    out: multiprocessing.Queue = ctx.Queue()
    kwargs = {"pool": POOL, "expect": n, "tokens": args.tokens,
              "delay_ms": args.delay_ms, "web_pid": web_pid}  # fmt: skip
    worker = ctx.Process(
        target=_worker_main, args=(out, kwargs, args.client_loop), daemon=True
    )
    cores = CoreUse(sorted({args.web_core, args.load_core}))
    cores.start()
    worker.start()
    spy = py_spy_start(args, web_pid) if args.py_spy_phase == "tokens" else None
    load0 = load_side_cpu_s(load_pids)
    t0 = time.monotonic()
    threads = 0
    pending = set(tasks)
    # (monotonic s, web CPU s, /proc/stat's cores, the load side's CPU s by part)
    cpu_samples: list[tuple[float, float, dict, dict]] = []
    while pending:
        _, pending = await asyncio.wait(pending, timeout=0.1)
        threads = max(threads, proc_threads(web_pid))
        cpu_samples.append((time.monotonic(), proc_cpu_s(web_pid), CoreUse.read(),
                            load_side_cpu_s(load_pids)))  # fmt: skip
        ends_at = t0 + args.tokens * args.delay_ms / 1000 - 0.5
        if spy is None and args.py_spy_phase == "done" and time.monotonic() > ends_at:
            spy = py_spy_start(args, web_pid)
    load1 = load_side_cpu_s(load_pids)
    wall = time.monotonic() - t0
    busy = cores.stop()
    phases: Phases = await asyncio.to_thread(out.get, True, 30)
    parts = {k: (load1[k] - load0[k]) / wall for k in load1}
    parts["worker"] = phases.cpu_s / wall
    if spy is not None:
        spy.wait(timeout=30)
    worker.join(10)
    return {"stats": stats, "phases": phases, "threads": threads, "wall_s": wall,
            "busy": busy, "irq": cores.irq, "load_parts": parts, "rss_open": rss_open,
            "web_cpu_end": proc_cpu_s(web_pid), "cpu_samples": cpu_samples}  # fmt: skip


def run_one(n: int, args: argparse.Namespace) -> dict:
    """One step: ``n`` streams through one web process on the web core."""
    from inference import keys
    from inference.connections import redis_sync
    from tests.stack import stack_env

    env = stack_env(for_tests=False)
    password = "ssebench-pass-123"
    bench_setup(password)
    redis = redis_sync()
    with ExitStack() as stack:
        with pinned({args.web_core}):
            web = stack.enter_context(web_server(env, args.server, args.profile))
        pid = web.process.pid
        pin_tree(pid, {args.web_core}, args.nice)
        # the pool looks served (the gateway admits only to a served pool)
        fake = "sse-bench-hold"
        redis.zadd(keys.workers_key(POOL), {fake: time.time() + 3600})
        try:
            cookie, paths = asyncio.run(post_turns(web.base, password, n))
            host, port = web.base[7:].split(":")
            rss_before, base_threads = proc_rss_mib(pid), proc_threads(pid)
            run = loop_run(
                fan_out(n, args, pid, host, int(port), cookie, paths, args.load_pids),
                args.client_loop,
            )
        finally:
            redis.zrem(keys.workers_key(POOL), fake)
        run["base_threads"] = base_threads
        warnings = web.warnings()
    return _figures(n, args, run, rss_before, warnings)


def _figures(
    n: int, args: argparse.Namespace, run: dict, rss0: float, warn: dict
) -> dict:
    stats: list[StreamStats] = run["stats"]
    ph: Phases = run["phases"]
    done = [s for s in stats if s.done]
    errors: dict[str, int] = {}
    for s in stats:
        if not s.done:
            errors[s.error] = errors.get(s.error, 0) + 1
    # the token frames' window: the first tick to the last token frame read (a web
    # process that lags sends frames after the last tick); its CPU from the samples
    t_tok = ph.at["tokens"]
    t_last = max((m for s in stats for m in s.token_monos[-1:]), default=t_tok)
    window_frames = sum(len(s.token_monos) for s in stats)
    samples = run["cpu_samples"]
    at_last = next((x for x in samples if x[0] >= t_last), samples[-1])
    at_tok = next((x for x in reversed(samples) if x[0] <= t_tok), samples[0])
    cpu_last = at_last[1] if at_last[0] >= t_last else run["web_cpu_end"]
    # the cores and the load side over the token frames' window (the gap's)
    span = max(1e-9, at_last[0] - at_tok[0])
    cores = sorted({args.web_core, args.load_core})
    tok_busy, tok_irq = CoreUse.between(at_tok[2], at_last[2], cores)
    tok_parts = {k: (at_last[3][k] - at_tok[3][k]) / span for k in at_tok[3]}
    tok_parts["worker"] = (ph.cpu["tokens_end"] - ph.cpu["tokens"]) / max(
        1e-9, ph.at["tokens_end"] - ph.at["tokens"]
    )
    steady_cpu = cpu_last - ph.web_cpu["tokens"]
    settle_cpu = run["web_cpu_end"] - cpu_last
    gaps = [g for s in done for g in s.gaps_ms]
    done_lags = [s.done_lag_ms for s in done if s.done_lag_ms is not None]
    lags = [lag for s in done for lag in s.lags_ms]
    busy = run["busy"]
    return {
        "n": n, "server": args.server, "completed": len(done), "errors": errors,
        "gap_p50": pct(gaps, 50), "gap_p99": pct(gaps, 99),
        "relay_p50": pct(lags, 50), "relay_p99": pct(lags, 99),
        "done_lag_p50": pct(done_lags, 50), "done_lag_p99": pct(done_lags, 99),
        "cpu_us_per_frame": steady_cpu * 1e6 / max(1, window_frames),
        "web_cores": steady_cpu / max(1e-9, t_last - t_tok),
        "settle_ms_per_answer": settle_cpu * 1000 / max(1, n),
        "frames_per_s": window_frames / max(1e-9, t_last - t_tok),
        "threads": run["threads"],
        "threads_per_stream": max(0, run["threads"] - run["base_threads"]) / n,
        "rss_per_k": (run["rss_open"] - rss0) * 1000 / n,
        "web_core_busy": tok_busy[args.web_core],
        "load_core_busy": tok_busy[args.load_core],
        "web_core_irq": tok_irq[args.web_core],
        "load_core_irq": tok_irq[args.load_core],
        "load_parts": tok_parts,
        "run_web_core_busy": busy[args.web_core],
        "run_load_core_busy": busy[args.load_core],
        "run_load_cores_ours": sum(run["load_parts"].values()),
        "load_cores_ours": sum(tok_parts.values()),
        "late_ticks": ph.late_ticks, "tick_rtt_max_ms": ph.tick_rtt_max_ms,
        "wall_s": run["wall_s"], "load_avg": os.getloadavg()[0], "warnings": warn,
    }  # fmt: skip


def ramp(args: argparse.Namespace) -> tuple[list[dict], int | None, str]:
    """Run the steps :func:`bench.sse_report.ramp_next` picks from the first
    ``--streams`` N (doubling to the first failure, then bisecting; at most
    ``--ramp-steps`` steps, ``--ramp-max`` streams). Return the rows, the ceiling
    (None: the step above it was refused as load-bound) and why the step above it
    failed (:func:`bench.sse_report.ramp_result`)."""
    rows: list[dict] = []
    verdicts: list[tuple[int, str]] = []
    while (n := ramp_next(verdicts, start=args.streams[0], most=args.ramp_max,
                          max_steps=args.ramp_steps)) is not None:  # fmt: skip
        r = run_one(n, args)
        rows.append(r)
        report(r, args)
        verdicts.append((n, step_verdict(r)))
    ceiling, why = ramp_result(verdicts)
    return rows, ceiling, why


def hot_path_rows(args: argparse.Namespace) -> list[dict]:
    """The benchmark table's rows of issue 29's SSE measures (one step at the largest
    ``--streams`` N, and the ramp when ``--ramp``): each ``{measure, value, unit,
    pinning, params, goal}``. Needs :func:`setup` first."""
    big = run_one(max(args.streams), args)
    report(big, args)
    params = (
        f"N={big['n']}, {args.tokens} tokens {args.delay_ms:g} ms apart, {args.server}"
    )
    pin = pinning(args)
    rows = [
        {"measure": "web CPU per SSE frame, pinned", "value": big["cpu_us_per_frame"],
         "unit": "us", "goal": "<= 100 us"},
        {"measure": "threads held by the web process per open stream",
         "value": big["threads_per_stream"], "unit": "threads", "goal": "0"},
        {"measure": f"done lag when {big['n']:,} answers end together, p99",
         "value": big["done_lag_p99"], "unit": "ms", "goal": "<= 2000 ms (N=1000)"},
        {"measure": "frame gap p99", "value": big["gap_p99"], "unit": "ms",
         "goal": "< 250 ms"},
        {"measure": "load core busy", "value": big["load_core_busy"], "unit": "share",
         "goal": f"< {LOAD_SATURATED}"},
    ]  # fmt: skip
    for row in rows:
        row.update(pinning=pin, params=params)
    steps = [big]
    if args.ramp:
        ramped, ceiling, why = ramp(args)
        steps += ramped
        rows.append({
            "measure": "streams per web core, frame gap p99 < 250 ms",
            "value": ceiling if ceiling is not None else f"not reported ({why})",
            "unit": "streams", "goal": ">= 2000", "pinning": pin,
            "params": f"ramp x2 from {args.streams[0]}, then bisected (steps "
            f"{', '.join(str(r['n']) for r in ramped)}); above it: {why}",
        })  # fmt: skip
    rows.append({**per_core_derived(steps, args), "pinning": pin})
    return rows


def setup(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse options, start Django, pin this process and the services to the load core
    (restored by :func:`unpin`)."""
    parser = option_parser(
        __doc__.split("\n\n")[0], streams=[200], tokens=200, delay_ms=20.0,
        ramp=False, ramp_max=4000, ramp_steps=8, server="uvicorn", nice=0,
    )  # fmt: skip
    parser.add_argument("--profile", metavar="FILE", help="cProfile the web process")
    parser.add_argument(
        "--py-spy",
        metavar="FILE",
        help="sample the web process with py-spy (raw folded stacks, FILE; py-spy "
        "from the venv) while tokens stream, or from the first done frame on",
    )
    parser.add_argument("--py-spy-phase", choices=["tokens", "done"], default="tokens")
    loops = ["uvloop", "asyncio"]  # the client's and the worker's event loop
    parser.add_argument("--client-loop", choices=loops, default="uvloop")
    args = parser.parse_args(argv)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    django_start({**ENV, "CHAT_MAX_TOKENS": str(args.tokens)})
    args.web_core, args.load_core = cores_pick()
    args.load_pids = service_pids()
    for pid in args.load_pids.values():
        pin_tree(pid, {args.load_core}, args.nice)
    os.sched_setaffinity(0, {args.load_core})
    os.setpriority(os.PRIO_PROCESS, 0, args.nice)  # what this process starts inherits
    return args


def unpin(args: argparse.Namespace) -> None:
    """Give the services every core back."""
    for pid in args.load_pids.values():
        pin_tree(pid, ALL_CORES, 0)


def main() -> None:
    args = setup()
    try:
        rows = hot_path_rows(args)
    finally:
        unpin(args)
    for row in rows:
        print(f"{row['measure']}: {row['value']} {row['unit']} (goal {row['goal']}; "
              f"{row['params']}; {row['pinning']})")  # fmt: skip
        bench_record(bench="sse_fanout", metric=row["measure"], value=row["value"],
                     unit=row["unit"], params=f"{row['params']}; {row['pinning']}",
                     goal=row["goal"])  # fmt: skip


if __name__ == "__main__":
    main()
