"""Shared helpers of the benchmark scripts: percentiles and machine-readable figures.

Every script under ``bench/`` prints its figures for a person to read. It also calls
:func:`bench_record` for each headline figure; when ``BENCH_RESULTS`` names a file
(``make bench`` sets it; ``bench/run_all.py`` turns the lines into the table in
``bench/results/``), each call appends one JSON line
there, so one run of all benchmarks becomes one Markdown table. Without the variable
the call does nothing, so a script run by hand behaves as before.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

RESULTS_ENV = "BENCH_RESULTS"


def pct(values: list[float], q: float) -> float:
    """Return the ``q``-th percentile (0-100) of ``values`` by nearest rank; 0.0 if empty."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1))))
    return ordered[rank]


def bench_record(
    *,
    bench: str,
    metric: str,
    value: float | int | str,
    unit: str = "",
    params: str = "",
    goal: str = "",
) -> None:
    """Append one figure to the ``BENCH_RESULTS`` file (JSON lines), if it is set.

    ``bench`` is the script's short name ("sse_fanout"), ``metric`` what was measured
    ("frame gap p99"), ``value`` the figure in ``unit`` ("ms", "streams", "req/s"),
    ``params`` the run's shape ("N=1000, one web process") and ``goal`` the target
    for it, if any ("< 250 ms"). Floats are rounded to 3 significant decimals.
    """
    path = os.environ.get(RESULTS_ENV)
    if not path:
        return
    if isinstance(value, float):
        value = round(value, 3)
    row = {
        "bench": bench,
        "metric": metric,
        "value": value,
        "unit": unit,
        "params": params,
        "goal": goal,
    }
    with Path(path).open("a", encoding="utf-8") as out:
        out.write(json.dumps(row, ensure_ascii=False) + "\n")


def figures_record(
    *,
    bench: str,
    params: str,
    figures: Iterable[tuple[str, float | int | str, str, str]],
) -> None:
    """Record each ``(metric, value, unit, goal)`` of ``figures`` with
    :func:`bench_record`, all of one run's shape ``params``."""
    for metric, value, unit, goal in figures:
        bench_record(
            bench=bench, metric=metric, value=value, unit=unit, params=params, goal=goal
        )


def _git(*args: str) -> str:
    done = subprocess.run(
        ["git", *args], cwd=ROOT, capture_output=True, text=True, check=False
    )
    return done.stdout.strip()


def commit_describe() -> tuple[str, str]:
    """Return (short commit of HEAD, its description with whether tracked files
    differ from it). Taken when the run starts: the figures are that code's."""
    short = _git("rev-parse", "--short", "HEAD")
    dirty = bool(_git("status", "--porcelain", "--untracked-files=no"))
    state = " (tree dirty: uncommitted changes)" if dirty else " (clean tree)"
    return short, short + state


def machine_line(when: str) -> str:
    """The cores and the load average now, ``when`` saying when that was."""
    one, five, fifteen = os.getloadavg()
    return (
        f"{os.cpu_count()} cores, load average {one:.2f} {five:.2f} {fifteen:.2f} "
        f"{when} (1/5/15 min)"
    )
