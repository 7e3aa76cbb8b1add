"""How ``bench/sse_fanout.py`` reports a step: its pinning, its verdict (why it
failed), the printed line, and the py-spy sampler of the web process."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

GAP_LIMIT_MS = 250.0
# A load core busier than this (all processes on it) may be what limited a step.
LOAD_SATURATED = 0.9
LOAD_VERDICT = "load core saturated"


def py_spy_start(args: argparse.Namespace, pid: int) -> subprocess.Popen | None:
    """py-spy sampling ``pid`` for the token ticks (``--py-spy``), pinned to the load
    core like the rest of the load side."""
    if not args.py_spy:
        return None
    secs = max(1, int(args.tokens * args.delay_ms / 1000))
    if args.py_spy_phase == "done":
        secs = 10
    spy = Path(sys.executable).parent / "py-spy"
    argv = [
        spy,
        "record",
        "-p",
        pid,
        "-d",
        secs,
        "-r",
        200,
        "-f",
        "raw",
        "--gil",
        "-o",
        args.py_spy,
    ]
    return subprocess.Popen([str(a) for a in argv], stdout=subprocess.DEVNULL)


def pinning(args: argparse.Namespace) -> str:
    """How a figure was pinned, in words."""
    if args.web_core == args.load_core:
        return f"unpinned: one core ({args.web_core}) for all"
    return (
        f"{args.server} on core {args.web_core}; client, worker, Redis, PostgreSQL on "
        f"core {args.load_core}; nice {args.nice}; machine load {os.getloadavg()[0]:.1f} on "
        f"{os.cpu_count()} cores"
    )


def step_verdict(r: dict) -> str:
    """Why a step failed ('' when it passed). A step that kept frame gap p99 under
    GAP_LIMIT_MS passed even with its load core saturated (a starved load side can
    only delay frames, so the pass holds); one that missed it with the load core
    saturated (>= LOAD_SATURATED busy over the token frames' window, every process
    on it: a shared machine's other work counts) failed as LOAD_VERDICT, not the
    web's failure."""
    if r["completed"] < r["n"]:
        return f"{r['n'] - r['completed']} streams did not complete: {r['errors']}"
    if r["gap_p99"] < GAP_LIMIT_MS:
        return ""
    gap = f"frame gap p99 {r['gap_p99']:.0f} ms >= {GAP_LIMIT_MS:.0f} ms"
    if r["load_core_busy"] >= LOAD_SATURATED:
        return (
            f"{LOAD_VERDICT} ({r['load_core_busy']:.0%} busy, ours "
            f"{r['load_cores_ours']:.2f} core, worker {r['late_ticks']} ticks late; "
            f"{gap}): not web-bound"
        )
    return (
        f"{gap} (web core {r['web_core_busy']:.0%} busy, web {r['web_cores']:.2f} "
        f"core; load core {r['load_core_busy']:.0%} busy, worker {r['late_ticks']} "
        "ticks late)"
    )


def report(r: dict, args: argparse.Namespace) -> None:
    """Print one step for a person."""
    parts = " ".join(f"{k} {v:.2f}" for k, v in r.get("load_parts", {}).items())
    print(
        f"{r['server']} N={r['n']}: done {r['completed']}; web CPU/frame "
        f"{r['cpu_us_per_frame']:.0f} us ({r['frames_per_s']:.0f} frames/s, web "
        f"{r['web_cores']:.2f} core); settle CPU {r['settle_ms_per_answer']:.2f} "
        f"ms/answer; gap p50/p99 {r['gap_p50']:.0f}/{r['gap_p99']:.0f} ms; relay "
        f"p50/p99 {r['relay_p50']:.0f}/{r['relay_p99']:.0f} ms; done lag p50/p99 "
        f"{r['done_lag_p50']:.0f}/{r['done_lag_p99']:.0f} ms; threads {r['threads']} "
        f"({r['threads_per_stream']:.3f}/stream); RSS {r['rss_per_k']:.0f} MiB/1k"
    )
    print(
        f"    cores busy: web core {r['web_core_busy']:.0%} (interrupts "
        f"{r.get('web_core_irq', 0):.0%}), load core {r['load_core_busy']:.0%} "
        f"(interrupts {r.get('load_core_irq', 0):.0%}, ours "
        f"{r['load_cores_ours']:.2f}: {parts}) while tokens streamed; whole run: web "
        f"core {r['run_web_core_busy']:.0%}, load core {r['run_load_core_busy']:.0%} "
        f"(ours {r['run_load_cores_ours']:.2f}); worker ticks "
        f"late {r['late_ticks']}, tick RTT max {r['tick_rtt_max_ms']:.0f} ms; "
        f"{pinning(args)}; verdict: {step_verdict(r) or 'pass'}"
    )
    for line, count in sorted(r["warnings"].items(), key=lambda kv: -kv[1])[:5]:
        print(f"    web log x{count}: {line}")


def per_core_derived(steps: list[dict], args: argparse.Namespace) -> dict:
    """The streams-per-core row derived from a step neither side limited: at the
    largest N whose streams all completed with frame gap p99 < GAP_LIMIT_MS (the web
    process kept up: a starved one sends fewer, fuller frames and its core use says
    what it got, not what it needed) and the load side's own CPU (client, worker,
    Redis, PostgreSQL: not the other work a shared machine runs on that core) below
    LOAD_SATURATED core, the web process's own use u of its core (CPU s per s, /proc)
    gives N / u, the streams one fully busy web core would carry at that step's
    frame rate per stream (= 1 / (CPU per frame x frames/s per stream)). Derived,
    not measured: it assumes a frame costs the same at N / u streams (the
    coalescing interval grows past SSE_FRAMES_PER_S x SSE_COALESCE_MS streams, so
    fewer frames per stream then: a lower bound on that count). Its value says why
    when no step qualifies."""
    row = {
        "measure": "streams per web core, derived (N / web core use)",
        "unit": "streams",
        "goal": ">= 2000",
    }
    ok = [
        r for r in steps
        if r["completed"] == r["n"] and r["load_cores_ours"] < LOAD_SATURATED
        and r["web_cores"] > 0 and r["gap_p99"] < GAP_LIMIT_MS
    ]  # fmt: skip
    if not ok:
        gaps = ", ".join(f"N={r['n']}: {r['gap_p99']:.0f} ms" for r in steps)
        row["value"] = "not derived (no step kept frame gap p99 < 250 ms"
        row["value"] += f" with the load side below {LOAD_SATURATED} core)"
        row["params"] = f"{args.server}; gap p99 {gaps}"
        return row
    r = max(ok, key=lambda r: r["n"])
    per_stream_fps = r["frames_per_s"] / r["n"]
    row["value"] = round(r["n"] / r["web_cores"])
    row["params"] = (
        f"derived from N={r['n']} ({args.server}, {args.tokens} tokens "
        f"{args.delay_ms:g} ms apart): web {r['web_cores']:.2f} core, "
        f"{r['cpu_us_per_frame']:.0f} us/frame, {per_stream_fps:.1f} frames/s per "
        f"stream, frame gap p99 {r['gap_p99']:.0f} ms, load side "
        f"{r['load_cores_ours']:.2f} core (load core {r['load_core_busy']:.0%} busy "
        "in all)"
    )
    return row


# The ramp's resolution: it stops bisecting when the last pass and the first failure
# are this close (streams), or RAMP_RESOLUTION_SHARE of the last pass apart; steps are
# rounded to RAMP_ROUND streams.
RAMP_RESOLUTION = 200
RAMP_RESOLUTION_SHARE = 0.1
RAMP_ROUND = 100


def ramp_bounds(steps: list[tuple[int, str]]) -> tuple[int, tuple[int, str] | None]:
    """(the largest N that passed below the smallest failure, or 0; the smallest
    failure as ``(N, why)``, or None while none failed) of ``steps``, each ``(N, why
    it failed)`` with ``''`` for a pass."""
    fails = [(n, why) for n, why in steps if why]
    first_fail = min(fails, default=None)
    below = [n for n, why in steps if not why and (not fails or n < first_fail[0])]
    return max(below, default=0), first_fail


def ramp_next(
    steps: list[tuple[int, str]], *, start: int, most: int, max_steps: int
) -> int | None:
    """The next N the ramp runs, or None when it is done. ``steps``: those run so far,
    each ``(N, why it failed)`` (``''``: passed, :func:`step_verdict`).

    Doubles N from ``start`` while every step passes (the last step ``most`` streams
    where doubling would pass it); after the first failure bisects between the
    largest pass below it and the smallest failure (halfway, rounded to RAMP_ROUND
    streams) until they are at most RAMP_RESOLUTION streams or RAMP_RESOLUTION_SHARE
    of the pass apart (a first step that fails: between 0 and it). Stops after
    ``max_steps`` steps. A step refused as load-bound (LOAD_VERDICT) bounds the
    bisection like a failure: the steps below it may still say where the web breaks
    (:func:`ramp_result` reports no ceiling only when the step above it was one)."""
    if not steps:
        return start
    if len(steps) >= max_steps:
        return None
    lo, fail = ramp_bounds(steps)
    if fail is None:
        last = max(n for n, _why in steps)
        return min(last * 2, most) if last < most else None
    hi = fail[0]
    if hi - lo <= max(RAMP_RESOLUTION, RAMP_RESOLUTION_SHARE * lo):
        return None
    mid = round((lo + hi) / 2 / RAMP_ROUND) * RAMP_ROUND
    return mid if lo < mid < hi else None


def ramp_result(steps: list[tuple[int, str]]) -> tuple[int | None, str]:
    """(the ceiling: the largest N that passed below the smallest failure, None when
    that failure was refused as load-bound (LOAD_VERDICT: the web's ceiling is not
    known); why that failure failed, or why the ramp ended) of the steps
    :func:`ramp_next` chose."""
    lo, fail = ramp_bounds(steps)
    if fail is None:
        return lo, "ramp ended before a step failed (--ramp-max or --ramp-steps)"
    if fail[1].startswith(LOAD_VERDICT):
        passed = f"passed up to N={lo}" if lo else "no step passed"
        return None, f"N={fail[0]}: {fail[1]} ({passed})"
    return lo, f"N={fail[0]}: {fail[1]}"
