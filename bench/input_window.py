"""What input moderation costs a chat turn, with the window of the last user turns
(SAFETY_WINDOW_TURNS=3, the default) and without it (1): p50 / p90 of
:func:`gateway.generations.admission.input_check` per turn, and the turn's shared
embedding request beside it (the newest message, embedded once per turn for memory,
the cache and moderation alike; the window adds nothing to it).

    .venv/bin/python bench/input_window.py [--turns 60] [--cpus 0 1] [--profile]

Runs on the dev services (migrated). Starts one embedding worker (all-MiniLM-L6-v2,
``manage.py run_inference_worker --engine sentence-transformers``, one thread) on pool
``bench-embed``; the embedded classifier (with its decoded views and language check,
as served) reads its vectors. One process saturates one core: ``--cpus A B`` pins this
process (the web tier's work) to core A and the worker to core B (``taskset``), so
neither waits for the other's core; the load average is printed before and after.

Each timed turn belongs to a conversation of ``--conversation`` user turns (fresh
texts in each, so no verdict cache hit), sent in order as the chat sends them: the
newest message is embedded (the shared vector), then ``input_check`` judges it and the
window of the last user turns, whose earlier turns' vectors were kept when they were
sent (:func:`safety.windows.window_judge`); "turns 2+" are those with a window (a
conversation's first turn has none). ``--profile`` prints where
``input_check`` spends its time with the window (cProfile, cumulative; a pass of its
own after the timed ones). Prints
Markdown tables for ``bench/results/``.
"""

from __future__ import annotations

import cProfile
import os
import pstats
import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.boot import ROOT, django_start, option_parser  # noqa: E402
from bench.procs import processes_stop, spawn, workers_wait  # noqa: E402
from bench.record import bench_record  # noqa: E402

TURNS = [
    "I am planning a small garden behind the house. ({id})",
    "The soil is mostly clay and it stays wet in spring. ({id})",
    "Which vegetables grow well there? ({id})",
    "How often should I water tomatoes in July? ({id})",
    "What does a soil pH of 6.5 mean for carrots? ({id})",
]


def _turn(user, messages, *, profile: cProfile.Profile | None):
    """Send the conversation's newest turn: (shared embedding ms, input_check ms)."""
    from chatsite.errors import ModerationBlocked
    from gateway.generations import GenerationRequest, Surface
    from gateway.generations.admission import input_check
    from inference.embeddings import TextVector

    query = TextVector(messages[-1]["content"])
    start = time.perf_counter()
    query.get()  # embedded once per turn by memory / the cache, before moderation
    embed_ms = (time.perf_counter() - start) * 1000
    request = GenerationRequest(
        user=user, messages=messages, params={}, surface=Surface.CHAT, query=query
    )
    start = time.perf_counter()
    if profile is not None:
        profile.enable()
    try:
        input_check(request, job_id=str(uuid.uuid4()))
    except ModerationBlocked:
        pass
    finally:
        if profile is not None:
            profile.disable()
    return embed_ms, (time.perf_counter() - start) * 1000


def _timed(user, *, turns: int, per_conversation: int, profile=None):
    """``turns`` turns in conversations of ``per_conversation`` user turns; the
    first turn of each (no window yet) is timed too, as a chat's first turn is."""
    embeds, checks, windowed = [], [], []
    while len(checks) < turns:
        tag = uuid.uuid4().hex[:6]
        messages: list[dict[str, str]] = []
        for i in range(per_conversation):
            text = TURNS[i % len(TURNS)].format(id=tag)
            messages = [*messages, {"role": "user", "content": text}]
            embed_ms, check_ms = _turn(user, messages, profile=profile)
            embeds.append(embed_ms)
            checks.append(check_ms)
            windowed.append(i > 0)
            messages.append({"role": "assistant", "content": "Sure."})
    later = [c for c, w in zip(checks[:turns], windowed, strict=False) if w]
    return embeds[:turns], checks[:turns], later


def main() -> None:
    parser = option_parser(turns=60, conversation=4, cpus=[0, 1], profile=False)
    args = parser.parse_args()
    own_cpu, worker_cpu = args.cpus
    pinned = {own_cpu, worker_cpu} <= os.sched_getaffinity(0) and own_cpu != worker_cpu
    if pinned:
        os.sched_setaffinity(0, {own_cpu})
    django_start({"LOG_LEVEL": "WARNING", "EMBEDDING_POOL": "bench-embed"})
    from django.conf import settings
    from django.contrib.auth import get_user_model

    settings.EMBEDDING_POOL = "bench-embed"
    settings.SAFETY_BACKEND = "embedded"
    settings.SAFETY_INPUT_ENABLED = True
    settings.SAFETY_ABUSE_SUSPEND_SCORE = 10**6  # measured, never suspended
    user, _ = get_user_model().objects.get_or_create(username="bench-window")

    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_WAIT_POLICY": "PASSIVE"}
    manage = [sys.executable, str(ROOT / "manage.py"), "run_inference_worker"]
    taskset = ["taskset", "-c", str(worker_cpu)] if pinned else []
    worker = spawn(
        [*taskset, *manage]
        + ["--engine", "sentence-transformers", "--pool", "bench-embed"]
        + ["--threads", "1"],
        cwd=ROOT,
        env=env,
        stderr=True,
    )
    load_before = os.getloadavg()
    profile = cProfile.Profile() if args.profile else None
    try:
        workers_wait(["bench-embed"], [worker], timeout_s=180, poll_s=0.2)
        settings.SAFETY_WINDOW_TURNS = 3
        _timed(user, turns=8, per_conversation=args.conversation)  # warm up
        rows = []
        for window in (1, 3):
            settings.SAFETY_WINDOW_TURNS = window
            embeds, took, later = _timed(
                user, turns=args.turns, per_conversation=args.conversation
            )
            q = statistics.quantiles(took, n=10)
            rows.append(
                (
                    window,
                    statistics.median(took),
                    q[8],
                    statistics.median(later),
                    statistics.median(embeds),
                )
            )
        if profile is not None:  # a pass of its own: the profiler slows what it sees
            _timed(user, turns=args.turns, per_conversation=3, profile=profile)
    finally:
        processes_stop([worker])
    load_after = os.getloadavg()
    where = (
        f"this process on core {own_cpu}, the embedding worker (1 thread) on core "
        f"{worker_cpu}"
        if pinned
        else f"not pinned (cores {own_cpu} and {worker_cpu} are not both available)"
    )
    print(
        f"input_check per turn, {args.turns} turns per mode in conversations of "
        f"{args.conversation} user turns, embedded classifier; {where}"
    )
    print(
        "load average (1/5/15 min) before "
        + "/".join(f"{x:.2f}" for x in load_before)
        + ", after "
        + "/".join(f"{x:.2f}" for x in load_after)
    )
    print()
    print(
        "| SAFETY_WINDOW_TURNS | input_check p50 ms | p90 ms | p50, turns 2+ ms "
        "| shared embedding p50 ms |"
    )
    print("|---|---|---|---|---|")
    for window, p50, p90, later, embed in rows:
        print(f"| {window} | {p50:.1f} | {p90:.1f} | {later:.1f} | {embed:.1f} |")
        bench_record(
            bench="input_window",
            metric=f"input moderation per turn p50, window {window}",
            value=round(p50, 2),
            unit="ms",
            params=f"{'pinned' if pinned else 'not pinned'}, p90 {p90:.1f}, "
            f"p50 of turns 2+ {later:.1f}, load {load_before[0]:.1f}",
            goal="<= 15 ms" if window == 3 else "",
        )
    if profile is not None:
        print("\nwhere input_check spends its time, window 3 (cumulative):\n")
        pstats.Stats(profile).sort_stats("cumulative").print_stats(25)


if __name__ == "__main__":
    main()
