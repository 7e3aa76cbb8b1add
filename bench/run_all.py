"""Run every benchmark under bench/ at a quick size and write one Markdown table.

    .venv/bin/python bench/run_all.py [--only NAME ...] [--out DIR]

``make bench`` runs this (after ``make migrate``). Each script of :data:`BENCHES` runs
as its own process with ``BENCH_RESULTS`` naming one JSON-lines file; the scripts'
:func:`bench.record.bench_record` calls append their headline figures to it. A script
that needs something this machine lacks (the vLLM venv, HAProxy, a script another
change has not landed yet) is skipped with a note; one that fails or runs past its
time limit is noted with its last lines of output. The figures then become one table
(benchmark, metric, value, unit, params, goal) under a header with the date, the git
commit (and whether the tree was dirty), the core count and the load average, written
to ``bench/results/<date>-<commit>.md`` and printed. The first benchmark,
bench/hot_path.py, leaves its goal table (the issue's goals side by side with this
run's figures) beside the results file; it heads the page, above the table.

The sizes here are quick defaults (the whole run stays well under 15 minutes on two
busy cores): read the figures as a smoke test of each path and its order of
magnitude; run a script by hand at its full default size for the issue's goals.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import datetime
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.hot_path_table import page_beside  # noqa: E402
from bench.record import RESULTS_ENV, commit_describe, machine_line  # noqa: E402

VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"
VLLM_MODEL = ROOT / ".var" / "models" / "smollm2-hf"
LITELLM = ROOT / ".venv-litellm" / "bin" / "litellm"
# The embedding worker (all-MiniLM-L6-v2) for scripts that embed through the
# inference tier; its pool is EMBEDDING_POOL (tests/stack.py picks it from --engine).
EMBED_WORKER = ["--engine", "sentence-transformers"]
# Lines of a failed script's output kept in the table's notes (the last: usually
# the exception).
TAIL_LINES = 1
# The whole run's time limit, s: `make bench` must end well under 15 minutes (issue
# 13); a benchmark gets at most what is left of it, and none starts with under
# MIN_START_S seconds left.
BUDGET_S = 13 * 60
MIN_START_S = 30


def _needs_vllm() -> str | None:
    if not VLLM_PYTHON.exists():
        return "needs the vLLM venv (.venv-vllm: make venv-vllm)"
    if not (VLLM_MODEL / ".converted").exists():
        return f"needs the converted model ({VLLM_MODEL.relative_to(ROOT)}: make bench-batching)"
    return None


def _needs_bwrap() -> str | None:
    if shutil.which("bwrap") or shutil.which("bwrap", path="/usr/bin"):
        return None
    return "needs bubblewrap (make sandbox)"


@dataclass(frozen=True)
class Bench:
    """One benchmark script and how run_all runs it.

    ``args`` are its quick-size arguments (or a callable giving them at run time),
    ``timeout_s`` its wall-clock limit in seconds, ``needs`` a check returning why it
    cannot run here (None when it can), ``note`` a remark for the table's notes;
    ``embedding_worker``: the script embeds through the inference tier (the web tier
    runs no model), so an embedding worker runs beside it.
    """

    name: str
    args: list[str] | Callable[[], list[str]] = field(default_factory=list)
    timeout_s: int = 120
    needs: Callable[[], str | None] = lambda: None
    python: Path | None = None
    env: dict[str, str] = field(default_factory=dict)
    note: Callable[[], str | None] = lambda: None
    embedding_worker: bool = False

    @property
    def script(self) -> Path:
        return ROOT / "bench" / f"{self.name}.py"


# Quick sizes (the run stays under ~12 minutes on two busy cores; timeouts about twice
# each script's time there). The hot-path goal table first (it runs sse_fanout's and
# gateway_overhead's quick sizes), then the web tier under load: a cut run has them.
BENCHES: list[Bench] = [
    Bench(
        "hot_path",
        timeout_s=540,
        note=lambda: None if LITELLM.exists() else "no .venv-litellm: no LiteLLM ratio",
    ),
    Bench("gateway_admission", ["--n", "400", "--threads", "4"], 90),
    Bench(
        "cache_lookup",
        ["--entries", "2000", "--users", "20", "--queries", "50"],
        embedding_worker=True,
    ),
    Bench("turn_overhead", [], 240),
    Bench(
        "capacity",
        ["--calibrate", "30", "--cal-tokens", "10", "100", "--levels", "40", "100"]
        + ["--tokens", "40", "--idle-s", "1"],
        180,
    ),
    Bench("flood", ["--requests", "200", "--seconds", "2", "--turns", "3"], 150),
    Bench("upload_flood", ["--turns", "5"], 180),
    Bench("turn_latency", ["--turns", "3", "--max-tokens", "32"], 150),
    Bench("followup_turns", ["--turns", "6", "--max-tokens", "48"], 240),
    Bench(
        "affinity",
        ["--conversations", "2", "--turns", "10", "--question-words", "20"]
        + ["--think-s", "0.5"],
        240,
    ),
    Bench("engine_throughput", ["--rounds", "1", "--max-tokens", "24"], 180),
    Bench("search", ["--messages", "10000", "--users", "20", "--queries", "50"], 150),
    Bench(
        "retrieval",
        ["--sizes", "10000", "--queries", "50", "--passages", "150"]
        + ["--ef-search", "40"],
        180,
        embedding_worker=True,
    ),
    Bench("document_screening", [], 120),
    Bench("tools", ["--runs", "30", "--turns", "20"], 150, needs=_needs_bwrap),
    Bench("moderation_goals", ["--limit", "200"], 420),
    Bench("input_window", ["--turns", "30"], 240),
    Bench("window_recall", ["--limit", "150"], 480),
    Bench("moderation", ["--prompts", "2", "--max-tokens", "32"], 240),
    Bench("output_false_cuts", ["--limit", "200"], 180),
    Bench(
        "embeddings",
        ["--turns", "8", "--cold-starts", "2", "--seconds", "1", "--trials", "1"]
        + ["--lone-requests", "20"],
        300,
    ),
    Bench(
        "batching",
        ["--levels", "1,4", "--max-tokens", "32"],
        300,
        needs=_needs_vllm,
        python=VLLM_PYTHON,
        env={"VLLM_LOGGING_LEVEL": "WARNING", "TQDM_DISABLE": "1"},
    ),
]


@dataclass
class Outcome:
    """What one benchmark run left: exit code (None: not run), seconds, notes."""

    name: str
    rc: int | None = None
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)


def bench_run(bench: Bench, *, results: Path, timeout_s: float) -> Outcome:
    """Run one benchmark script to completion or ``timeout_s`` seconds; echo its output.

    The script runs in a session of its own, so a timeout ends it and every process it
    started (the web process, workers) at once.
    """
    outcome = Outcome(bench.name)
    if not bench.script.exists():
        outcome.notes.append(f"skipped, bench/{bench.name}.py not here")
        return outcome
    reason = bench.needs()
    if reason:
        outcome.notes.append(f"skipped, {reason}")
        return outcome
    args = bench.args() if callable(bench.args) else bench.args
    python = str(bench.python or sys.executable)
    env = {**os.environ, **bench.env, RESULTS_ENV: str(results)}
    env.setdefault("HF_HUB_OFFLINE", "1")
    env["PYTHONUNBUFFERED"] = "1"
    print(f"\n=== {bench.name} {' '.join(args)}", flush=True)
    started = time.monotonic()
    try:
        with (
            _embedding_worker() if bench.embedding_worker else contextlib.nullcontext()
        ):
            outcome.rc, timed_out, tail = _script_run(
                [python, str(bench.script), *args], env=env, timeout_s=timeout_s
            )
    except Exception as exc:  # noqa: BLE001 - one benchmark's set-up failing ends only it
        outcome.notes.append(f"not run: {exc!r}")
        return outcome
    outcome.seconds = time.monotonic() - started
    if timed_out:
        outcome.notes.append(f"stopped at its {timeout_s:.0f} s limit")
    elif outcome.rc:
        last = " / ".join(tail)
        outcome.notes.append(f"failed (exit {outcome.rc}): {last}")
    extra = bench.note()
    if extra:
        outcome.notes.append(extra)
    return outcome


@contextlib.contextmanager
def _embedding_worker() -> Iterator[None]:
    """Run an embedding worker process on the dev services while the block runs."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chatsite.settings.dev")
    import django

    django.setup()
    from tests.stack import stack_env, worker_processes

    with worker_processes([EMBED_WORKER], stack_env(for_tests=False)):
        yield


def _script_run(
    command: list[str], *, env: dict[str, str], timeout_s: float
) -> tuple[int, bool, list[str]]:
    """Run ``command`` echoing its output; return (exit code, timed out, last lines)."""
    tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
    proc = subprocess.Popen(
        command,
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    timer_fired = []

    def on_timeout() -> None:
        timer_fired.append(True)
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    timer = threading.Timer(timeout_s, on_timeout)
    timer.start()
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            print(line, end="", flush=True)
            if line.strip():
                tail.append(line.rstrip())
        rc = proc.wait()
    finally:
        timer.cancel()
    return rc, bool(timer_fired), list(tail)


def results_read(lines: Iterable[str]) -> list[dict]:
    """Parse JSON lines written by :func:`bench.record.bench_record`; skip blank lines."""
    return [json.loads(line) for line in lines if line.strip()]


def _cell(value: object) -> str:
    text = str(value).replace("\n", " ")
    return text.replace("|", "\\|")


def table_render(
    *,
    rows: list[dict],
    header: dict[str, str],
    notes: Iterable[str] = (),
    section: str = "",
) -> str:
    """Return the Markdown page: a title, ``header`` as a bullet list, ``section``
    (a Markdown page of its own, its headings one level down: the hot-path goal
    table), one table of ``rows`` (dicts with bench, metric, value, unit, params,
    goal, in their order of arrival), then ``notes`` as bullets under "Notes"."""
    out = ["# Benchmarks", ""]
    out += [f"- {key}: {value}" for key, value in header.items()]
    if section:
        out += [""] + [
            "#" + line if line.startswith("#") else line
            for line in section.rstrip("\n").splitlines()
        ]
        out += ["", "## Every benchmark's figures"]
    out += [
        "",
        "| benchmark | metric | value | unit | params | goal |",
        "|---|---|---:|---|---|---|",
    ]
    for row in rows:
        cells = [
            row.get(key, "")
            for key in ("bench", "metric", "value", "unit", "params", "goal")
        ]
        out.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    notes = list(notes)
    if notes:
        out += ["", "Notes:", ""]
        out += [f"- {_cell(n)}" for n in notes]
    return "\n".join(out) + "\n"


def machine_header(
    *, now: datetime.datetime, seconds: float, commit: str
) -> dict[str, str]:
    """The table's header: date (UTC), ``commit`` (:func:`commit_describe`), cores,
    load average (at the end of the run) and run time (``seconds``)."""
    return {
        "date": now.strftime("%Y-%m-%d %H:%M UTC"),
        "commit": commit,
        "machine": machine_line("at the end"),
        "run": f"{seconds / 60:.1f} min at run_all.py's quick sizes "
        "(figures on a busy machine are upper bounds)",
    }


def _lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def main() -> None:
    """Run the benchmarks, write the table to bench/results/ and print it."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", help="benchmark names to run")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    parser.add_argument("--budget-s", type=float, default=BUDGET_S)
    args = parser.parse_args()
    chosen = [b for b in BENCHES if not args.only or b.name in args.only]
    started = time.monotonic()
    now = datetime.datetime.now(datetime.UTC)
    short, commit = commit_describe()
    notes: list[str] = []
    with tempfile.TemporaryDirectory(prefix="bench-") as tmp:
        results = Path(tmp) / "results.jsonl"
        results.touch()
        for bench in chosen:
            left = args.budget_s - (time.monotonic() - started)
            if left < MIN_START_S:
                notes.append(f"{bench.name}: skipped, the run's time budget was spent")
                continue
            before = _lines(results)
            outcome = bench_run(
                bench, results=results, timeout_s=min(bench.timeout_s, left)
            )
            said = list(outcome.notes)
            if outcome.rc is not None:
                said.insert(0, f"{outcome.seconds:.0f} s")
                if outcome.rc == 0 and _lines(results) == before:
                    said.append("ran, but records no figure (no bench_record call)")
            notes.append(f"{bench.name}: " + "; ".join(said))
        rows = results_read(results.read_text(encoding="utf-8").splitlines())
        hot = page_beside(results)
        section = hot.read_text(encoding="utf-8") if hot.exists() else ""
    if section:  # its rows are in the section, beside their goals
        rows = [row for row in rows if row.get("bench") != "hot_path"]
    header = machine_header(now=now, seconds=time.monotonic() - started, commit=commit)
    page = table_render(rows=rows, header=header, notes=notes, section=section)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"{now:%Y-%m-%d}-{short}.md"
    path.write_text(page, encoding="utf-8")
    print("\n" + page)
    print(f"written to {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")


if __name__ == "__main__":
    main()
