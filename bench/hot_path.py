"""The web tier's hot path in one run: the issue's goal table, side by side (measure |
today | now | goal | met?), each row with its pinning and its params.

    .venv/bin/python bench/hot_path.py [--parts sse api moderation turn]
        [--streams 200] [--tokens 100] [--ramp [--ramp-steps 8]] [--turns 10] [--users 100]
        [--moderation-turns 10] [--concurrency 1 50] [--min-samples 20]
        [--moderation-n 20] [--out FILE]

The defaults are ``make bench``'s quick sizes (about 5 minutes at load average 6-9
on two cores, less on a quiet machine);
the issue's sizes: ``--streams 1000 --tokens 200 --ramp --turns 20
--moderation-turns 20 --min-samples 60 --moderation-n 60``.

Each part runs the ``hot_path_rows()`` of one benchmark, in a process of its own
(each loads Django with its own settings and pins its own processes; see each
script's docstring for how):

- ``sse``: bench/sse_fanout.py: web CPU per SSE frame, threads per open stream, done
  lag of N answers ending together, streams per web core (``--ramp``);
- ``turn``: bench/turn_hot_path.py: web CPU per plain turn, ``--users`` at once, input
  moderation's cost on a turn;
- ``api``: bench/gateway_overhead.py: API admission, added TTFT and requests/s vs
  LiteLLM (no ratio without LiteLLM's venv, ``.venv-litellm``);
- ``moderation``: bench/api_moderation_cost.py: input moderation's cost on an API
  request.

A part that fails, lacks its function or runs past its time limit is noted; the
others still run. The page (bench/hot_path_table.py) is written after every part to
``--out`` (default ``bench/results/<date>-hot-path.md``), so a run cut short keeps
what it measured, and printed at the end. Under bench/run_all.py (``BENCH_RESULTS``
set) every row is also recorded with :func:`bench.record.bench_record` and the page
copied beside the results file for run_all's page.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.boot import ROOT  # noqa: E402
from bench.hot_path_table import PartOutcome, page_beside, table_render  # noqa: E402
from bench.record import (  # noqa: E402
    RESULTS_ENV,
    bench_record,
    commit_describe,
    machine_line,
)

# The quickest first: a run cut by run_all's time limit keeps the most rows.
PARTS = ["sse", "api", "moderation", "turn"]
# Each part's wall-clock limit at the quick sizes, s: about twice its time there at
# load average 6-9 on two cores (sse 65 s, api 36-157 s: LiteLLM's start and its c=50
# rounds on a busy machine, turn 205 s); a part stopped at its limit loses its rows,
# so these are generous: they catch a part that hangs.
LIMITS_S = {"sse": 240, "api": 300, "moderation": 180, "turn": 420}
# What ``--ramp`` adds to the sse part's limit per ramp step, s (a step at 3,200
# streams takes about 60 s on two cores, most of it POSTing the turns).
RAMP_STEP_LIMIT_S = 90
# After SIGTERM, how long a part may take to stop what it started before SIGKILL, s.
STOP_GRACE_S = 30
LITELLM = ROOT / ".venv-litellm" / "bin" / "litellm"


def option_parser() -> argparse.ArgumentParser:
    """The options of the module docstring."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--parts", nargs="+", choices=PARTS, default=PARTS)
    p.add_argument("--streams", type=int, default=200, help="sse: open streams")
    p.add_argument("--tokens", type=int, default=100, help="sse: tokens per stream")
    p.add_argument("--ramp", action="store_true", help="sse: ramp N until it breaks")
    p.add_argument(
        "--ramp-steps", type=int, default=8, help="sse: the ramp's most steps"
    )
    p.add_argument("--turns", type=int, default=10, help="turn: c=1 turns")
    p.add_argument("--users", type=int, default=100, help="turn: users at once")
    p.add_argument("--moderation-turns", type=int, default=10, help="turn: per kind")
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 50], help="api")
    p.add_argument("--min-samples", type=int, default=20, help="api: per level")
    p.add_argument("--moderation-n", type=int, default=20, help="moderation: per kind")
    p.add_argument("--out", type=Path, help="the page (default bench/results/...)")
    p.add_argument("--part", choices=PARTS, help=argparse.SUPPRESS)  # a part's process
    p.add_argument("--rows-out", type=Path, help=argparse.SUPPRESS)
    return p


def _sse(args: argparse.Namespace) -> list[dict]:
    from bench import sse_fanout

    argv = ["--streams", str(args.streams), "--tokens", str(args.tokens)]
    if args.ramp:
        argv += ["--ramp", "--ramp-steps", str(args.ramp_steps)]
    bench_args = sse_fanout.setup(argv)
    try:
        return sse_fanout.hot_path_rows(bench_args)
    finally:
        sse_fanout.unpin(bench_args)


def _turn(args: argparse.Namespace) -> list[dict]:
    from bench import turn_hot_path, turn_overhead
    from bench.boot import django_start

    django_start({"INFERENCE_DEFAULT_POOL": turn_overhead.POOL, "LOG_LEVEL": "WARNING"})
    bench_args = argparse.Namespace(
        turns=args.turns,
        users=args.users,
        rounds=1,
        moderation_turns=args.moderation_turns,
        py_spy=None,
    )
    return turn_hot_path.hot_path_rows(bench_args)


def _api(args: argparse.Namespace) -> list[dict]:
    from bench import gateway_overhead
    from bench.overhead_levels import overhead_parser

    argv = ["--concurrency", *map(str, args.concurrency), "--rounds", "1"]
    argv += ["--min-samples", str(args.min_samples), "--moderation-cost", "0"]
    return gateway_overhead.hot_path_rows(overhead_parser().parse_args(argv))


def _moderation(args: argparse.Namespace) -> list[dict]:
    from bench import api_moderation_cost

    rows_of = getattr(api_moderation_cost, "hot_path_rows", None)
    if rows_of is None:
        raise LookupError("bench/api_moderation_cost.py has no hot_path_rows() yet")
    options = api_moderation_cost.parser().parse_args(["--n", str(args.moderation_n)])
    return rows_of(options)


RUNNERS = {"sse": _sse, "turn": _turn, "api": _api, "moderation": _moderation}


def part_main(args: argparse.Namespace) -> None:
    """In a part's own process: run it, write its rows (JSON list) to ``--rows-out``.
    A missing function exits 3 with its reason on the last line."""
    try:
        rows = RUNNERS[args.part](args)
    except LookupError as exc:
        print(f"hot-path-skip: {exc}", flush=True)
        raise SystemExit(3) from None
    args.rows_out.write_text(json.dumps(rows, default=str), encoding="utf-8")


def _stop_signal(signum: int, _frame: Any) -> None:
    raise SystemExit(128 + signum)  # unwinds: the bench stops what it started


def _descendants(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        try:
            kids = [int(c) for c in task.read_text().split()]
        except OSError:
            continue
        for kid in kids:
            found += [kid, *_descendants(kid)]
    return found


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM the part (it stops its servers), then SIGKILL whatever is left of its
    process tree after :data:`STOP_GRACE_S`."""
    tree = [proc.pid, *_descendants(proc.pid)]
    proc.terminate()
    try:
        proc.wait(STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        pass
    for pid in [*tree, *_descendants(proc.pid)]:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            continue
    proc.wait()


def part_limit_s(name: str, args: argparse.Namespace) -> int:
    """Part ``name``'s wall-clock limit, s: LIMITS_S, and for the sse part's ramp
    RAMP_STEP_LIMIT_S per ``--ramp-steps`` step."""
    extra = RAMP_STEP_LIMIT_S * args.ramp_steps if name == "sse" and args.ramp else 0
    return LIMITS_S[name] + extra


def part_run(name: str, argv: list[str], tmp: Path, limit_s: int) -> PartOutcome:
    """Run part ``name`` in its own process (this script with ``--part``), echoing
    its output, stopped after ``limit_s`` seconds; return its rows and notes."""
    outcome = PartOutcome(name)
    rows_out = tmp / f"{name}.json"
    env = {k: v for k, v in os.environ.items() if k != RESULTS_ENV}  # rows: here
    command = [sys.executable, __file__, *argv, "--part", name]
    print(f"\n=== hot path: {name}", flush=True)
    started = time.monotonic()
    proc = subprocess.Popen(
        [*command, "--rows-out", str(rows_out)],
        cwd=ROOT,
        env={**env, "PYTHONUNBUFFERED": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    last = ""
    fired: list[bool] = []

    def on_limit() -> None:
        fired.append(True)
        _stop(proc)

    timer = threading.Timer(limit_s, on_limit)
    timer.start()
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            print(line, end="", flush=True)
            last = line.strip() or last
    finally:
        timer.cancel()
    if fired:
        outcome.notes.append(f"stopped at its {limit_s} s limit")
    outcome.seconds = time.monotonic() - started
    rc = proc.wait()
    if rc == 3 and last.startswith("hot-path-skip: "):
        outcome.notes.append("skipped, " + last.removeprefix("hot-path-skip: "))
    elif rc and not outcome.notes:
        outcome.notes.append(f"failed (exit {rc}): {last}")
    if rows_out.exists():
        outcome.rows = json.loads(rows_out.read_text(encoding="utf-8"))
        outcome.ran = True
    if name == "api" and not LITELLM.exists():
        outcome.notes.append("no LiteLLM venv (.venv-litellm): ours measured alone")
    return outcome


def header(now: datetime.datetime, commit: str, argv: list[str]) -> dict[str, str]:
    """The page's header: date, commit, machine and load, the command."""
    return {
        "date": now.strftime("%Y-%m-%d %H:%M UTC"),
        "commit": commit,
        "machine": machine_line("when written"),
        "command": "bench/hot_path.py " + " ".join(argv),
    }


def main() -> None:
    """Run the parts, write the page after each, print it at the end."""
    args = option_parser().parse_args()
    if args.part:
        signal.signal(signal.SIGTERM, _stop_signal)
        part_main(args)
        return
    argv = sys.argv[1:]
    now = datetime.datetime.now(datetime.UTC)
    out = args.out or ROOT / "bench" / "results" / f"{now:%Y-%m-%d}-hot-path.md"
    results = os.environ.get(RESULTS_ENV)
    commit = commit_describe()[1]
    parts = {name: PartOutcome(name) for name in PARTS if name in args.parts}
    page = ""
    with tempfile.TemporaryDirectory(prefix="hot-path-") as tmp:
        for name in parts:
            limit_s = part_limit_s(name, args)
            parts[name] = part_run(name, argv, Path(tmp), limit_s)
            page = table_render(parts=parts, header=header(now, commit, argv))
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(page, encoding="utf-8")
            if results:
                page_beside(Path(results)).write_text(page, encoding="utf-8")
    for part in parts.values():
        for row in part.rows:
            bench_record(
                bench="hot_path",
                metric=str(row.get("measure")),
                value=row.get("value", ""),
                unit=str(row.get("unit", "")),
                params=f"{row.get('params', '')}; {row.get('pinning', '')}",
                goal=str(row.get("goal", "")),
            )
    print("\n" + page)
    print(f"written to {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}")


if __name__ == "__main__":
    main()
