"""The capacity benchmark's page: unit costs, the runs, the model's check and the
projection, as Markdown (printed, and written with ``--markdown``)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from bench.capacity_model import Row, UnitCosts
from bench.capacity_probe import Delta


def _fmt(value: float) -> str:
    if value == int(value) and abs(value) >= 1:
        return f"{int(value):,}"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 1:
        return f"{value:,.2f}"
    return f"{value:.4g}"


def _top_commands(delta: Delta, k: int = 6) -> str:
    top = sorted(delta.redis_calls.items(), key=lambda kv: -kv[1])[:k]
    return ", ".join(f"{name} {count}" for name, count in top)


def units_table(units: UnitCosts, split: tuple[float, float]) -> list[str]:
    """The measured unit costs as Markdown table lines; ``split``: web CPU s per
    turn of the posting window, and of the streaming window per frame."""
    stmts = (
        "n/a (pg_stat_statements not loaded)"
        if units.pg_statements_per_turn is None
        else _fmt(units.pg_statements_per_turn)
    )
    rows = [
        ("web CPU per turn", f"{units.web.per_turn * 1e3:.3f}", "ms"),
        ("web CPU per token relayed", f"{units.web.per_x * 1e6:.1f}", "us"),
        ("  of which: POST + stream opening per turn", f"{split[0] * 1e3:.3f}", "ms"),
        ("  streaming window per SSE frame (upper bound)", f"{split[1] * 1e6:.0f}", "us"),
        ("web CPU idle (one process)", f"{units.web_idle_cores * 100:.2f}", "% core"),
        ("SSE frames per turn (meta, done)", f"{units.frames.per_turn:.2f}", "frames"),
        ("SSE frames per token", f"{units.frames.per_x:.3f}", "frames"),
        ("Redis commands per turn", f"{units.redis_ops.per_turn:.1f}", "ops"),
        ("Redis commands per token", f"{units.redis_ops.per_x:.3f}", "ops"),
        ("Redis bytes per turn (in + out)", _fmt(units.redis_bytes.per_turn), "B"),
        ("Redis bytes per token (in + out)", f"{units.redis_bytes.per_x:.1f}", "B"),
        (
            "Redis idle (one web + one worker)",
            f"{units.redis_idle_ops_per_s:.1f} ops/s, "
            f"{units.redis_idle_bytes_per_s:,.0f} B/s",
            "",
        ),
        ("PostgreSQL statements per turn", stmts, ""),
        ("PostgreSQL transactions per turn", f"{units.pg_xacts_per_turn:.2f}", ""),
        ("PostgreSQL WAL per turn", _fmt(units.pg_wal_bytes_per_turn), "B"),
        ("worker CPU per turn (outside the engine)", f"{units.worker.per_turn * 1e3:.3f}", "ms"),
        ("worker CPU per token (outside the engine)", f"{units.worker.per_x * 1e6:.2f}", "us"),
    ]  # fmt: skip
    out = ["| unit cost | value | unit |", "|---|---:|---|"]
    out += [f"| {a} | {b} | {c} |" for a, b, c in rows]
    return out


def runs_table(runs: Sequence[Any]) -> list[str]:
    """One line per run: its shape and raw counts."""
    out = [
        "| run | done | frames | web CPU s | worker CPU s | Redis ops | Redis MB"
        " | PG xacts | WAL kB | s | top commands |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in runs:
        d = r.delta
        out.append(
            f"| {r.n} x {r.tokens} tokens | {r.completed} | {r.frames} | "
            f"{d.web_cpu_s:.2f} | {d.worker_cpu_s:.2f} | {d.redis_ops} | "
            f"{d.redis_bytes / 1e6:.2f} | {d.pg_xacts} | {d.pg_wal_bytes / 1e3:.0f} | "
            f"{d.wall_s:.1f} | {_top_commands(d)} |"
        )
    for r in runs:
        if r.errors:
            out.append(f"\n{r.n} x {r.tokens} tokens, not completed: {r.errors}")
    return out


def checks_table(checks: Sequence[Any], goal: float) -> tuple[list[str], bool]:
    """The model against the validation runs; and whether every check met ``goal``
    (web CPU and Redis commands; frames are shown, not judged)."""
    out = [
        "| streams | figure | predicted | measured | error | within goal |",
        "|---:|---|---:|---:|---:|---|",
    ]
    ok = True
    for run, rows in checks:
        for what, predicted, measured in rows:
            error = abs(predicted - measured) / max(abs(measured), 1e-9)
            judged = what != "frames"
            met = error <= goal
            ok = ok and (met or not judged)
            verdict = ("yes" if met else "NO") if judged else "(input)"
            out.append(
                f"| {run.n} | {what} | {_fmt(predicted)} | {_fmt(measured)} | "
                f"{error * 100:.1f} % | {verdict} |"
            )
    return out, ok


def projection_table(rows: Sequence[Row], tenfold: Sequence[Row]) -> list[str]:
    """The fleet at peak, each figure with its formula, and at 10x the peak (same
    formulas)."""
    out = [
        "| figure | at peak | at 10x | unit | formula (at peak) |",
        "|---|---:|---:|---|---|",
    ]
    out += [
        f"| {r.what} | {_fmt(r.value)} | {_fmt(t.value)} | {r.unit} | {r.formula} |"
        for r, t in zip(rows, tenfold, strict=True)
    ]
    return out


def report_print(
    *,
    units: UnitCosts,
    idle: Delta,
    cal: Sequence[Any],
    checks: Sequence[Any],
    rows: Sequence[Row],
    tenfold: Sequence[Row],
    args: argparse.Namespace,
    machine: str,
    goal: float,
    split: tuple[float, float],
) -> str:
    """Print the page and return it (Markdown)."""
    check_lines, ok = checks_table(checks, goal)
    lines = [
        "# Capacity model",
        "",
        f"- machine: {machine}",
        f"- calibration: {args.calibrate} turns x {args.cal_tokens} tokens; validation: "
        f"{args.levels} concurrent streams x {args.tokens} tokens; tokens "
        f"{args.delay_ms:g} ms apart ({1000 / args.delay_ms:.0f} tokens/s per stream)",
        f"- idle window {idle.wall_s:.1f} s: {idle.redis_ops} Redis commands "
        f"({_top_commands(idle)})",
        "",
        "## Unit costs",
        "",
        *units_table(units, split),
        "",
        "## Runs",
        "",
        *runs_table([*cal, *(run for run, _ in checks)]),
        "",
        f"## The model against measured runs (goal: within {goal * 100:.0f} %)",
        "",
        *check_lines,
        "",
        f"All judged figures within the goal: {'yes' if ok else 'NO'}.",
        "",
        "## Fleet at peak (5,000 messages/s, 25,000 streams, 2.5 M tokens/s) and 10x",
        "",
        *projection_table(rows, tenfold),
        "",
    ]
    page = "\n".join(lines)
    print(page)
    return page
