"""The tools' figures: how long the run_python sandbox takes to start.

    .venv/bin/python bench/tools.py [--runs 30]

Runs ``pass`` in the sandbox (tools.sandbox.python_run, the settings' limits) ``--runs``
times after one warm-up run and prints p50/p95/min/max of the wall time from the
launch to the end of the run, in ms; beside it the same interpreter started bare
(``/usr/bin/python3 -I -c pass``, no sandbox), so the sandbox's own share shows.
Issue 26's goal: sandbox start p50 <= 150 ms. Needs bubblewrap (make sandbox); no
services.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.boot import django_start  # noqa: E402
from bench.record import figures_record, pct  # noqa: E402

GOAL_P50_MS = 150.0


def bare_ms(python: str) -> float:
    """Wall time of ``python -I -c pass`` outside any sandbox, ms."""
    started = time.monotonic()
    subprocess.run([python, "-I", "-c", "pass"], check=True, env={})
    return (time.monotonic() - started) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    django_start()
    from tools.sandbox import SandboxLimits, python_run

    limits = SandboxLimits.from_settings()
    python_run("pass", limits=limits)  # warm-up: page cache, first exec of bwrap
    sandboxed: list[float] = []
    for _ in range(args.runs):
        result = python_run("pass", limits=limits)
        if not result.ok:
            raise SystemExit(f"the sandbox failed: {result}")
        sandboxed.append(result.wall_ms)
    bare = [bare_ms(limits.python) for _ in range(args.runs)]
    rows = [("sandboxed (python_run)", sandboxed), ("bare python3 -I", bare)]
    print(f"run_python start: `pass`, {args.runs} runs each, ms")
    print(f"{'':24} {'p50':>7} {'p95':>7} {'min':>7} {'max':>7}")
    for name, values in rows:
        figures = [pct(values, 50), pct(values, 95), min(values), max(values)]
        print(f"{name:24} " + " ".join(f"{v:7.1f}" for v in figures))
    p50 = pct(sandboxed, 50)
    verdict = "met" if p50 <= GOAL_P50_MS else "missed"
    print(f"goal p50 <= {GOAL_P50_MS:.0f} ms: {verdict}")
    figures_record(
        bench="tools",
        params=f"`pass`, {args.runs} runs",
        figures=[
            ("sandbox start p50", p50, "ms", f"<= {GOAL_P50_MS:.0f} ms"),
            ("sandbox start p95", pct(sandboxed, 95), "ms", ""),
            ("bare python3 start p50", pct(bare, 50), "ms", ""),
        ],
    )


if __name__ == "__main__":
    main()
