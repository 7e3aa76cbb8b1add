"""What screening the conversation (the window of the last user turns) adds to input
moderation: p50 / p90 of :func:`gateway.generations.admission.input_check` per turn,
with SAFETY_WINDOW_TURNS=1 (the newest message alone) and 3 (plus the last three user
turns joined), and what the window adds to the turn's one shared embedding request.

    .venv/bin/python bench/input_window.py [--turns 60]

Runs on the dev services (migrated). Starts one embedding worker
(all-MiniLM-L6-v2, ``manage.py run_inference_worker --engine sentence-transformers``,
one thread) on pool ``bench-embed``; the embedded classifier reads its vectors. Each
timed turn is a chat request of a three-turn conversation whose newest message was
embedded once already (the turn's shared vector, as memory and the cache embed it),
with the window registered to be embedded in the same request (as the chat turn does,
:meth:`inference.embeddings.TextVector.also`), so the figure is moderation's own cost:
the newest message's verdict, plus in the window mode the window's verdict. Texts are fresh each turn (no verdict
cache hit). Prints a Markdown table for ``bench/results/``.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.boot import ROOT, django_start, option_parser  # noqa: E402
from bench.procs import processes_stop, spawn, workers_wait  # noqa: E402

EARLIER = [
    "I am planning a small garden behind the house.",
    "The soil is mostly clay and it stays wet in spring.",
]
# the shared embedding request of each turn, ms (with the window's text in mode 3)
EMBED_MS: list[float] = []
QUESTIONS = [
    "Which vegetables grow well there? ({id})",
    "How often should I water tomatoes in July? ({id})",
    "What does a soil pH of 6.5 mean for carrots? ({id})",
]


def _request(user, messages):
    from django.conf import settings

    from gateway.generations import GenerationRequest, Surface
    from inference.embeddings import TextVector
    from safety.windows import window_text

    query = TextVector(messages[-1]["content"])
    window = window_text(messages, turns=settings.SAFETY_WINDOW_TURNS)
    if window is not None:
        query.also(window)  # as the chat turn's prompt_build registers it
    start = time.perf_counter()
    query.get()  # embedded once per turn by memory / the cache, before moderation
    EMBED_MS.append((time.perf_counter() - start) * 1000)
    return GenerationRequest(
        user=user,
        messages=messages,
        params={},
        surface=Surface.CHAT,
        query=query,
    )


def _timed(user, turns: int, window: int) -> list[float]:
    from django.conf import settings

    from chatsite.errors import ModerationBlocked
    from gateway.generations.admission import input_check

    settings.SAFETY_WINDOW_TURNS = window
    took = []
    for i in range(turns):
        tag = uuid.uuid4().hex[:6]
        messages = [
            *({"role": "user", "content": f"{t} ({tag})"} for t in EARLIER),
            {"role": "user", "content": QUESTIONS[i % len(QUESTIONS)].format(id=tag)},
        ]
        request = _request(user, messages)
        start = time.perf_counter()
        try:
            input_check(request, job_id=str(uuid.uuid4()))
        except ModerationBlocked:
            pass
        took.append((time.perf_counter() - start) * 1000)
    return took


def main() -> None:
    parser = option_parser(turns=60)
    args = parser.parse_args()
    django_start({"LOG_LEVEL": "WARNING", "EMBEDDING_POOL": "bench-embed"})
    from django.conf import settings
    from django.contrib.auth import get_user_model

    settings.EMBEDDING_POOL = "bench-embed"
    settings.SAFETY_BACKEND = "embedded"
    settings.SAFETY_INPUT_ENABLED = True
    settings.SAFETY_VERDICT_CACHE_S = 0
    settings.SAFETY_ABUSE_SUSPEND_SCORE = 10**6  # measured, never suspended
    user, _ = get_user_model().objects.get_or_create(username="bench-window")

    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_WAIT_POLICY": "PASSIVE"}
    manage = [sys.executable, str(ROOT / "manage.py"), "run_inference_worker"]
    worker = spawn(
        [*manage, "--engine", "sentence-transformers", "--pool", "bench-embed"]
        + ["--threads", "1"],
        cwd=ROOT,
        env=env,
        stderr=True,
    )
    try:
        workers_wait(["bench-embed"], [worker], timeout_s=180, poll_s=0.2)
        _timed(user, 5, 3)  # warm up
        rows = []
        for window in (1, 3):
            EMBED_MS.clear()
            took = _timed(user, args.turns, window)
            q = statistics.quantiles(took, n=10)
            rows.append(
                (window, statistics.median(took), q[8], statistics.median(EMBED_MS))
            )
    finally:
        processes_stop([worker])
    print(f"input_check per turn, {args.turns} turns, embedded classifier, 1 thread")
    print()
    print(
        "| SAFETY_WINDOW_TURNS | input_check p50 ms | p90 ms | shared embedding p50 ms |"
    )
    print("|---|---|---|---|")
    for window, p50, p90, embed in rows:
        print(f"| {window} | {p50:.1f} | {p90:.1f} | {embed:.1f} |")


if __name__ == "__main__":
    main()
