"""Input moderation's own cost on a chat turn and on an API request: verdict cache
hit and miss apart, and the embedding forward pass measured apart.

    .venv/bin/python bench/api_moderation_cost.py [--n 60] [--pin on] [--profile FILE]

Runs on the dev services (``scripts/services.py up`` + ``manage.py migrate``) and
starts an embedding worker (all-MiniLM-L6-v2, sentence-transformers: the classifier's
vector comes from the inference tier). Times, in this process standing for the web
process, the input check admission runs
(:func:`gateway.generations.admission.input_check`) on a one-message request:

- ``chat hit`` / ``chat miss``: a chat turn (``client_authored`` false) whose vector
  was embedded before admission (a turn with memory or retrieval embeds its question
  first and shares the vector): moderation's own cost, the embedding left out;
- ``chat miss, vector embedded by moderation``: the same with no vector yet (memory
  off): the embedding request is moderation's;
- ``API hit`` / ``API miss``: ``/v1/chat/completions`` (every client-written message
  screened, :func:`safety.services.messages_moderate`); the miss embeds the message.

A hit is the same text again (its verdict in the verdict cache: one Redis MGET); a
miss a text never seen, without ids (a text with an id is embedded once more without
it, :func:`safety.classifiers.features.ids_removed`). Each row gives the wall p50 and
p99 (ms) and this process's CPU p50 (ms, ``process_time``).

Apart: the embedding request's round trip from this process (enqueue to vector), and
the forward pass alone (the worker's engine, :class:`SentenceTransformersEngine`, in
this process on the load core with one torch thread, as the pinned worker runs) for
the miss texts and for longer ones, fitted as fixed + per-token cost; the miss
minus the forward pass is the overhead around it.

Pinning (``--pin on``, :mod:`bench.pinning`): this process on the web core; the
embedding worker (started while this process sat on the load core, so its torch
threads are sized for one core), Redis and PostgreSQL on the other.
:func:`hot_path_rows` returns the goal table's rows.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("LOG_LEVEL", "WARNING")

import chatsite.blas_threads  # noqa: E402, F401  as the web process: before numpy
from bench.boot import ROOT, django_start, option_parser  # noqa: E402
from bench.pinning import Pinning, pinning_plan, service_pids  # noqa: E402
from bench.procs import processes_stop, spawn, workers_wait  # noqa: E402
from bench.record import bench_record, pct  # noqa: E402

GOALS = {"hit": "<= 3 ms", "miss": "<= 15 ms"}
WORDS = (
    "river lamp cedar orbit velvet harbor maple quartz meadow ember signal garden "
    "window copper pebble willow lantern canyon"
).split()
# (surface, cache, vector embedded before the check): the measured cases, in order
CASES = (
    ("chat", "hit", True),
    ("chat", "miss", True),
    ("chat", "miss", False),
    ("API", "hit", False),
    ("API", "miss", False),
)


def _text() -> str:
    """A plain question no earlier run asked (the verdict cache keys on the text),
    without ids; about 20 word pieces."""
    tag = uuid.uuid4().int
    picked = " ".join(WORDS[(tag >> (5 * k)) % len(WORDS)] for k in range(8))
    return f"Could you tell me a short story about the {picked} please?"


def _long_text(words: int) -> str:
    """A text of ``words`` plain words (about as many word pieces)."""
    tag = uuid.uuid4().int
    return " ".join(WORDS[(tag >> (k % 100)) % len(WORDS)] for k in range(words))


def _label(surface: str, cache: str, embedded: bool) -> str:
    if surface == "chat" and cache == "miss" and not embedded:
        return "chat miss, vector embedded by moderation"
    return f"{surface} {cache}"


def _checker(user: Any) -> Callable[[str, str, bool], tuple[float, float]]:
    """Return ``check(text, surface, embedded)``: one input check as admission runs
    it; returns (wall ms, CPU ms) of the check alone."""
    from gateway import generations
    from gateway.generations.admission import input_check
    from inference.embeddings import TextVector

    def check(text: str, surface: str, embedded: bool) -> tuple[float, float]:
        query = TextVector(text)
        if embedded:
            query.vector  # noqa: B018  the turn embedded its question before
        request = generations.GenerationRequest(
            user=user,
            messages=[{"role": "user", "content": text}],
            params={"max_tokens": 64},
            surface=generations.Surface.API
            if surface == "API"
            else generations.Surface.CHAT,
            query=query,
            client_authored=surface == "API",
        )
        wall, cpu = time.perf_counter(), time.process_time()
        input_check(request, job_id=uuid.uuid4().hex)
        return (time.perf_counter() - wall) * 1e3, (time.process_time() - cpu) * 1e3

    return check


def _summary(walls: list[float], cpus: list[float]) -> dict[str, float]:
    return {
        "p50": pct(walls, 50),
        "p99": pct(walls, 99),
        "cpu": statistics.median(cpus),
        "n": len(walls),
    }


def forward_pass(texts: dict[str, list[str]], *, reps: int = 3) -> dict[str, Any]:
    """Time the embedding engine's forward pass alone in this process (one torch
    thread, as a worker pinned to one core runs): for each group of ``texts``
    (label -> texts), the p50 wall and CPU (ms) of embedding one text, and its word
    pieces; then the fixed and per-token cost of a least-squares line over all."""
    import asyncio

    import torch

    from inference.engines.sbert import SentenceTransformersEngine

    torch.set_num_threads(1)
    engine = SentenceTransformersEngine(threads=1)
    asyncio.run(engine.start())
    model = engine._model  # noqa: SLF001  the engine's own model, to count tokens
    for _ in range(5):
        engine._run([["warm up the model"]])  # noqa: SLF001
    out: dict[str, Any] = {"groups": {}}
    points: list[tuple[int, float]] = []
    for label, group in texts.items():
        walls, cpus, tokens = [], [], []
        for text in group:
            n = len(model.tokenizer(text)["input_ids"])
            for _ in range(reps):
                wall, cpu = time.perf_counter(), time.thread_time()
                engine._run([[text]])  # noqa: SLF001
                walls.append((time.perf_counter() - wall) * 1e3)
                cpus.append((time.thread_time() - cpu) * 1e3)
                tokens.append(n)
                points.append((n, cpus[-1]))
        out["groups"][label] = {
            "p50": statistics.median(walls),
            "cpu": statistics.median(cpus),
            "tokens": statistics.median(tokens),
        }
    xs = [float(x) for x, _ in points]
    ys = [y for _, y in points]
    slope, intercept = statistics.linear_regression(xs, ys)
    out["per_token"], out["fixed"] = slope, intercept
    return out


def measure(n: int, pin: bool = True, *, profile: str | None = None) -> dict[str, Any]:
    """Run every case of :data:`CASES` ``n`` times (after a warm-up), the embedding
    round trip and the forward pass; return ``{label: {"p50", "p99", "cpu", "n"}}``
    (ms), ``"embed_rt"`` (the same), ``"forward"`` (:func:`forward_pass`) and
    ``"pinning"`` (its description). ``profile``: a file to write a cProfile of the
    API misses to (the top functions are printed)."""
    pinning = pinning_plan(pin)
    for pid in service_pids(ROOT / ".var").values():
        pinning.pin_tree(pid, web=False)
    env = {**os.environ, "SAFETY_INPUT_ENABLED": "1", "HF_HUB_OFFLINE": "1"}
    django_start({"SAFETY_INPUT_ENABLED": "1"})
    from django.conf import settings
    from django.contrib.auth import get_user_model

    from inference.embeddings import embed_texts

    settings.SAFETY_INPUT_ENABLED = True  # also when Django was set up without it
    _on(pinning, web=False)  # the worker inherits the load core: torch sizes for it
    cmd = [sys.executable, "manage.py", "run_inference_worker", "--pool", "embed"]
    worker = spawn(cmd + ["--engine", "sentence-transformers"], cwd=ROOT, env=env)
    _on(pinning, web=True)
    user, _ = get_user_model().objects.get_or_create(username="bench-moderation")
    check = _checker(user)
    out: dict[str, Any] = {}
    misses: list[str] = []
    try:
        workers_wait(["embed"], [worker], timeout_s=180)
        seen = _text()
        for surface, cache, embedded in CASES * 2:  # warm: classifier, connections
            check(seen if cache == "hit" else _text(), surface, embedded)
        profiler = cProfile.Profile() if profile else None
        for surface, cache, embedded in CASES:
            walls, cpus = [], []
            for _ in range(n):
                text = seen if cache == "hit" else _text()
                if cache == "miss":
                    misses.append(text)
                on = profiler is not None and surface == "API" and cache == "miss"
                if on:
                    profiler.enable()  # type: ignore[union-attr]
                wall, cpu = check(text, surface, embedded)
                if on:
                    profiler.disable()  # type: ignore[union-attr]
                walls.append(wall)
                cpus.append(cpu)
            out[_label(surface, cache, embedded)] = _summary(walls, cpus)
        walls, cpus = [], []
        for _ in range(n):
            wall, cpu = time.perf_counter(), time.process_time()
            embed_texts([_text()])
            walls.append((time.perf_counter() - wall) * 1e3)
            cpus.append((time.process_time() - cpu) * 1e3)
        out["embed_rt"] = _summary(walls, cpus)
    finally:
        processes_stop([worker], timeout_s=20)
    if profiler is not None and profile:
        profiler.dump_stats(profile)
        print(f"cProfile of {n} API misses ({profile}), by own time:")
        pstats.Stats(profile).sort_stats("tottime").print_stats(12)
    _on(pinning, web=False)  # the forward pass where the worker ran
    samples = misses[:: max(1, len(misses) // 20)][:20]
    out["forward"] = forward_pass(
        {
            "the miss texts": samples,
            "64 words": [_long_text(64) for _ in range(5)],
            "160 words": [_long_text(160) for _ in range(5)],
        }
    )
    _on(pinning, web=True)
    out["pinning"] = pinning.describe()
    return out


def _on(pinning: Pinning, *, web: bool) -> None:
    """Put this process on the web or the load core (no-op unpinned)."""
    if pinning.active:
        os.sched_setaffinity(0, pinning.web if web else pinning.load)


def rows_from(out: dict[str, Any], n: int) -> list[dict[str, Any]]:
    """The goal table's rows (``measure``, ``value``, ``unit``, ``pinning``,
    ``params``, ``goal``) of a :func:`measure` result."""
    pinning = out["pinning"]
    load = f"load average {os.getloadavg()[0]:.2f}"
    rows = []
    for surface, cache, embedded in CASES:
        label = _label(surface, cache, embedded)
        r = out[label]
        what = (
            "turn's vector embedded before (shared)"
            if embedded
            else "embedding request included"
            if cache == "miss"
            else "no embedding"
        )
        rows.append(
            {
                "measure": f"input moderation's own cost, {label}, p50",
                "value": round(r["p50"], 3),
                "unit": "ms",
                "pinning": pinning,
                "params": f"n={r['n']}, one user message, {what}; CPU p50 "
                f"{r['cpu']:.2f} ms, wall p99 {r['p99']:.2f} ms; {load}",
                "goal": GOALS[cache],
            }
        )
    fwd = out["forward"]
    miss = fwd["groups"]["the miss texts"]
    rt = out["embed_rt"]
    api_miss = out["API miss"]["p50"]
    extra = [
        (
            "embedding round trip (enqueue to vector), p50",
            rt["p50"],
            f"n={rt['n']}, one new text; web CPU p50 {rt['cpu']:.2f} ms",
        ),
        (
            "embedding forward pass alone, p50 (the miss texts)",
            miss["p50"],
            f"{miss['tokens']:.0f} word pieces, CPU p50 {miss['cpu']:.2f} ms, one "
            f"torch thread on the load core; fit: {fwd['fixed']:.2f} ms + "
            f"{fwd['per_token'] * 1000:.0f} us per word piece (CPU)",
        ),
        (
            "API miss minus the forward pass (moderation's overhead), p50",
            api_miss - miss["p50"],
            "API miss p50 - forward pass p50",
        ),
    ]
    for measure, value, params in extra:
        rows.append(
            {
                "measure": measure,
                "value": round(value, 3),
                "unit": "ms",
                "pinning": pinning,
                "params": f"{params}; {load}",
                "goal": "",
            }
        )
    return rows


def moderation_rows(n: int, pin: bool = True) -> list[dict[str, Any]]:
    """:func:`measure` ``n`` times per case as the goal table's rows
    (:func:`rows_from`): chat and API, verdict cache hit and miss apart."""
    return rows_from(measure(n, pin=pin), n)


def hot_path_rows(args: argparse.Namespace | None = None) -> list[dict[str, Any]]:
    """The web tier goal table's input moderation rows (``args`` from this module's
    parser; None: ``--n 60 --pin on``), each printed and recorded with
    :func:`bench.record.bench_record`. Needs the dev services (migrated)."""
    if args is None:
        args = parser().parse_args([])
    out = measure(args.n, pin=args.pin == "on", profile=args.profile)
    rows = rows_from(out, args.n)
    print(f"\ninput moderation's own cost; pinning: {out['pinning']}")
    for row in rows:
        print(
            f"  {row['measure']:64s} {row['value']:9.3f} {row['unit']:3s} "
            f"goal {row['goal'] or '-':9s} [{row['params']}]"
        )
        bench_record(
            bench="api_moderation_cost",
            metric=row["measure"],
            value=row["value"],
            unit=row["unit"],
            params=f"{row['params']}; {row['pinning']}",
            goal=row["goal"],
        )
    for label, group in out["forward"]["groups"].items():
        print(
            f"  forward pass, {label}: {group['tokens']:.0f} word pieces, wall p50 "
            f"{group['p50']:.2f} ms, CPU p50 {group['cpu']:.2f} ms"
        )
    return rows


def parser() -> argparse.ArgumentParser:
    """The options: ``--n`` checks per case, ``--pin on|off``, ``--profile FILE``."""
    out = option_parser(__doc__.split("\n\n")[0], n=60, pin="on")
    out.add_argument("--profile", metavar="FILE", help="cProfile the API misses")
    return out


def main() -> None:
    hot_path_rows(parser().parse_args())


if __name__ == "__main__":
    main()
