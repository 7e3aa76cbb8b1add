"""Two trees' web CPU per plain turn, POST to first frame, measured in one run with
their turns interleaved (A B, B A, A B, ...), so that the machine's drift (other
processes' load, a busy host) falls on both alike.

    .venv/bin/python bench/turn_cpu_ab.py --a /path/to/old/tree [--b .] [--pairs 40]

Each tree's web process (uvicorn, the tree's ``chatsite.asgi``, started in that
tree) runs on the web core (:mod:`bench.cpu_pin`); one scripted worker, the client,
PostgreSQL and Redis on the others; both web processes use the same services and
the same bench user. A turn and its window are those of the goal table's row
(:func:`bench.turn_hot_path._turn_with_cpu`: the web process's CPU clock from the
POST sent to the first token frame read; the answer's rest REST_S later, then the
process is let go quiet). Three warm turns each first. Prints each tree's mean
(sum / turns), median and p10-p90, and the paired differences (B - A: the B turn
minus the A turn of the same pair): their mean, median and the mean's standard
error, and how many pairs have B below A. Needs the dev services
(migrated), as bench/hot_path.py.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.boot import django_start  # noqa: E402
from bench.cpu_pin import load_note, load_pin, pinning_plan, web_pin  # noqa: E402
from bench.record import pct  # noqa: E402


@contextmanager
def _web_in(tree: Path, env: dict) -> Iterator[tuple[str, int]]:
    """The web process of ``tree`` (its base URL and pid), stopped on exit."""
    from tests.stack import Process, free_port, processes_stop, web_argv, web_wait

    port = free_port()
    stderr = tempfile.TemporaryFile()
    popen = subprocess.Popen(
        web_argv(port), cwd=tree, env=env, stdout=subprocess.DEVNULL, stderr=stderr
    )
    web = Process(popen=popen, what=f"web of {tree}", stderr=stderr)
    base = f"http://127.0.0.1:{port}"
    try:
        web_wait(base, web)
        yield base, popen.pid
    finally:
        processes_stop([web])


def _summary(name: str, cpu: list[float]) -> str:
    return (
        f"{name}: mean {statistics.mean(cpu):.3f} ms (sum / {len(cpu)} turns), "
        f"median {statistics.median(cpu):.3f}, p10-p90 {pct(cpu, 10):.2f}-"
        f"{pct(cpu, 90):.2f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--a", type=Path, required=True, help="tree A (the base)")
    parser.add_argument("--b", type=Path, default=Path("."), help="tree B")
    parser.add_argument("--pairs", type=int, default=40)
    args = parser.parse_args()
    from bench.turn_overhead import POOL

    django_start({"INFERENCE_DEFAULT_POOL": POOL, "LOG_LEVEL": "WARNING"})
    from bench.turn_hot_path import REST_S, _settled, _turn_with_cpu, _worker
    from bench.turn_overhead import login_http, users_setup
    from tests.stack import stack_env, worker_processes

    env = stack_env(
        {
            "SAFETY_INPUT_ENABLED": "0",
            "SAFETY_OUTPUT_ENABLED": "0",
            "CHAT_MESSAGE_RATE": "100000/m",
            "LOGIN_RATE": "100000/m",
            "CHAT_BACKGROUND_JOBS": "0",
            "LOG_LEVEL": "WARNING",
        },
        for_tests=False,
    )
    plan = pinning_plan()
    load_pin(plan)
    users = users_setup(1, memory=False)
    print(f"pinning: {plan.describe()}; {load_note()}")
    trees = {"A": args.a.resolve(), "B": args.b.resolve()}
    cpu: dict[str, list[float]] = {"A": [], "B": []}
    with (
        _web_in(trees["A"], env) as (base_a, pid_a),
        _web_in(trees["B"], env) as (base_b, pid_b),
    ):
        webs = {"A": (base_a, pid_a), "B": (base_b, pid_b)}
        sessions = {
            k: login_http(base, users[0].username) for k, (base, _) in webs.items()
        }
        with worker_processes([_worker(REST_S)], env) as workers:
            load_pin(plan, [w.pid for w in workers])
            for rounds, keep in ((3, False), (args.pairs, True)):
                for i in range(rounds):
                    for name in ("A", "B") if i % 2 == 0 else ("B", "A"):
                        base, pid = webs[name]
                        web_pin(plan, pid)
                        row = asyncio.run(_turn_with_cpu(base, sessions[name], pid))
                        _settled(pid, users)
                        if keep:
                            cpu[name].append(row["cpu_ms"])
                if not keep:
                    load_pin(plan)  # PostgreSQL's backends opened meanwhile
    for name in ("A", "B"):
        print(f"{_summary(name, cpu[name])}  [{trees[name]}]")
    diffs = [b - a for a, b in zip(cpu["A"], cpu["B"], strict=True)]
    error = statistics.stdev(diffs) / len(diffs) ** 0.5
    print(
        f"B - A per pair: mean {statistics.mean(diffs):+.3f} ms (s.e. {error:.3f}), "
        f"median "
        f"{statistics.median(diffs):+.3f}, p10-p90 {pct(diffs, 10):+.2f}-"
        f"{pct(diffs, 90):+.2f}; pairs with B below A: "
        f"{sum(d < 0 for d in diffs)} of {len(diffs)}; {load_note()}"
    )


if __name__ == "__main__":
    main()
