"""Input moderation's API miss, before and after a change, interleaved call by call.

    .venv/bin/python bench/moderation_pairs.py --before REV [--n 60] [--pin on]

On a shared machine the load can move the figures of two back-to-back runs of
``bench/api_moderation_cost.py`` more than a change of a few round trips does (see
bench/results/). This bench runs both sides in one process, alternating request by
request, so a change of load hits both:

- *before*: an embedding worker started from ``git archive REV`` (a temporary
  export, on the pool ``embed-before``) and, in this process, the export's
  ``inference/embeddings.py`` (the web tier's embedding client) in place of the
  tree's, patched into the embedded classifier;
- *after*: a worker of this tree (pool ``embed``) and this tree's client.

Only those two modules differ between the sides: a change elsewhere in the web
process (the classifier, the verdict cache) is not compared by this bench. Each
round times an API miss (:func:`bench.api_moderation_cost` ``_checker``: the input
check admission runs, with the embedding request; a text never seen) and a bare
embedding round trip (enqueue to vector) on each side, in alternating order. Prints
the p50 and p99 wall and the CPU p50 (ms, this process) per side and the median of
the per-round differences (after - before).

Pinning (``--pin on``, :mod:`bench.pinning`): this process on the web core; both
workers (started while this process sat on the load core), Redis and PostgreSQL on
the other. Needs the dev services (``scripts/services.py up`` + migrate).
"""

from __future__ import annotations

import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("LOG_LEVEL", "WARNING")

import chatsite.blas_threads  # noqa: E402, F401  as the web process: before numpy
from bench.api_moderation_cost import _checker, _on, _text  # noqa: E402
from bench.boot import ROOT, django_start, option_parser  # noqa: E402
from bench.pinning import pinning_plan, service_pids  # noqa: E402
from bench.procs import processes_stop, spawn, workers_wait  # noqa: E402
from bench.record import pct  # noqa: E402

BEFORE_POOL = "embed-before"


def _export(rev: str, into: Path) -> None:
    """Write the tree of ``rev`` into ``into`` (with this tree's ``.venv``)."""
    archive = subprocess.run(
        ["git", "archive", rev], cwd=ROOT, check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    (into / ".venv").symlink_to(ROOT / ".venv")


def _module(path: Path, name: str) -> Any:
    """Load the file ``path`` as a module named ``name`` (beside the tree's own)."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _timed(call: Any) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    call()
    return (time.perf_counter() - wall) * 1e3, (time.process_time() - cpu) * 1e3


def measure(rev: str, n: int, *, pin: bool) -> dict[str, dict[str, list[float]]]:
    """``n`` interleaved rounds; per side and case, the wall and CPU times (ms)."""
    pinning = pinning_plan(pin)
    for pid in service_pids(ROOT / ".var").values():
        pinning.pin_tree(pid, web=False)
    django_start({"SAFETY_INPUT_ENABLED": "1"})
    from django.conf import settings
    from django.contrib.auth import get_user_model

    import safety.classifiers.embedded as embedded
    from inference.embeddings import embed_texts

    settings.SAFETY_INPUT_ENABLED = True
    env = {
        **os.environ,
        "SAFETY_INPUT_ENABLED": "1",
        "HF_HUB_OFFLINE": "1",
        "REDIS_URL": settings.REDIS_URL,
        "DATABASE_URL": os.environ.get("DATABASE_URL")
        or _database_url(settings.DATABASES["default"]),
    }
    worker_cmd = [sys.executable, "manage.py", "run_inference_worker"]
    worker_cmd += ["--engine", "sentence-transformers", "--pool"]
    with tempfile.TemporaryDirectory(prefix="moderation-pairs-") as tmp:
        base = Path(tmp)
        _export(rev, base)
        before = _module(base / "inference" / "embeddings.py", "embeddings_before")
        _on(pinning, web=False)  # the workers inherit the load core
        workers = [
            spawn(worker_cmd + [BEFORE_POOL], cwd=base, env=env, stderr=True),
            spawn(worker_cmd + ["embed"], cwd=ROOT, env=env, stderr=True),
        ]
        _on(pinning, web=True)
        try:
            workers_wait([BEFORE_POOL, "embed"], workers, timeout_s=240)
            user, _ = get_user_model().objects.get_or_create(username="bench-pairs")
            check = _checker(user)
            sides = {
                "before": (
                    mock.patch.object(embedded, "embed_texts", before.embed_texts),
                    lambda: before.embed_texts([_text()], pool=BEFORE_POOL),
                    BEFORE_POOL,
                ),
                "after": (
                    mock.patch.object(embedded, "embed_texts", embed_texts),
                    lambda: embed_texts([_text()], pool="embed"),
                    "embed",
                ),
            }
            out: dict[str, dict[str, list[float]]] = {
                f"{side} {what}": []
                for side in sides
                for what in ("miss wall", "miss cpu", "rt wall", "rt cpu")
            }
            for i in range(n + 5):  # 5 rounds of warm-up
                order = list(sides) if i % 2 == 0 else list(sides)[::-1]
                for side in order:
                    patch, round_trip, pool = sides[side]
                    settings.EMBEDDING_POOL = pool
                    with patch:
                        miss = _timed(lambda: check(_text(), "API", False))
                    rt = _timed(round_trip)
                    if i >= 5:
                        for what, (wall, cpu) in (("miss", miss), ("rt", rt)):
                            out[f"{side} {what} wall"].append(wall)
                            out[f"{side} {what} cpu"].append(cpu)
        finally:
            processes_stop(workers, timeout_s=20)
    return out


def _database_url(db: dict[str, Any]) -> str:
    return (
        f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"
        if not db.get("PASSWORD")
        else f"postgres://{db['USER']}:{db['PASSWORD']}@{db['HOST']}:{db['PORT']}"
        f"/{db['NAME']}"
    )


def report(out: dict[str, dict[str, list[float]]] | Any) -> None:
    """Print the p50/p99 wall and the CPU p50 per side and case, and the median of the
    per-round differences (after - before)."""
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for what, label in (("miss", "API miss (input check)"), ("rt", "round trip")):
        for side in ("before", "after"):
            walls, cpus = out[f"{side} {what} wall"], out[f"{side} {what} cpu"]
            print(
                f"  {label:24s} {side:6s} wall p50 {pct(walls, 50):6.2f} ms, p99 "
                f"{pct(walls, 99):6.2f} ms; CPU p50 {statistics.median(cpus):5.2f} ms"
            )
        diffs = [
            a - b
            for a, b in zip(
                out[f"after {what} wall"], out[f"before {what} wall"], strict=True
            )
        ]
        print(
            f"  {label:24s} after - before, median per round {pct(diffs, 50):+.2f} ms"
        )


def main() -> None:
    parser = option_parser(__doc__.split("\n\n")[0], n=60, pin="on")
    parser.add_argument("--before", required=True, help="the git revision before")
    args = parser.parse_args()
    report(measure(args.before, args.n, pin=args.pin == "on"))


if __name__ == "__main__":
    main()
