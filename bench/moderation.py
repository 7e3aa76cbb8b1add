"""The cost of output moderation: TTFT and total time off / ``release`` / ``hold``.

    .venv/bin/python bench/moderation.py [--prompts 8] [--max-tokens 96]

Runs on the dev services (``make bench-moderation`` migrates first). Starts three
workers as processes (``manage.py run_inference_worker``): the scripted engine with a
realistic 25 ms per token on pool ``bench-scripted``, the embedded model (SmolLM2 via
llama.cpp) on ``bench-llm``, and the embedding model (all-MiniLM-L6-v2) the embedded
moderation classifier reads vectors from on ``bench-embed`` (one thread each, so
the model and the classifier do not share cores). Then, in this process,
each prompt is started through the gateway (:func:`gateway.generations.generation_start`)
and followed by the one follower every surface uses
(:func:`gateway.generations.generation_follow`), once per mode, same prompts:

- TTFT (ms): submit → the first *released* text (what a client would see);
- total (ms): submit → the answer ended and was settled;
- cut: answers the policy cut (all prompts are benign: every cut is a false one).

Then the false-cut rate: ordinary answers (:data:`ORDINARY_ANSWERS`, everyday and
sensitive-but-allowed topics, plus the answers SmolLM2 wrote above) are replayed
through the output moderation policy with the embedded classifier; it prints how many
were cut or flagged, and which windows.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.boot import ROOT, django_start, option_parser  # noqa: E402
from bench.corpus import MODERATION_PROMPTS, ORDINARY_ANSWERS  # noqa: E402
from bench.procs import processes_stop, spawn, workers_wait  # noqa: E402
from bench.record import bench_record  # noqa: E402

# The scripted engine's answer: ordinary prose, several sentences (25 ms per token).
SCRIPTED_ANSWER = (
    "Paris is the capital of France. It lies on the Seine, in the north of the "
    "country, and has about two million inhabitants. The city is known for its "
    "museums, such as the Louvre, and for the Eiffel Tower, built for the world fair "
    "of 1889. Its metro is one of the oldest in the world, and its cafes and parks "
    "make it a pleasant place to walk. Many visitors also take a boat trip on the "
    "river to see the bridges and the cathedral of Notre-Dame."
)


MODES = ("off", "release", "hold")


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


async def _one(prompt: str, *, pool: str, max_tokens: int, user) -> dict:
    from asgiref.sync import sync_to_async

    from gateway import generations

    submitted = time.monotonic()
    started = await sync_to_async(generations.generation_start)(
        generations.GenerationRequest(
            user=user,
            messages=[{"role": "user", "content": prompt}],
            # greedy: SmolLM2 writes the same answer in every mode, so times compare
            params={"max_tokens": max_tokens, "temperature": 0},
            surface=generations.Surface.API,
            model=pool,
        )
    )
    first = None
    text = ""
    outcome = None
    async for item in generations.generation_follow(started.generation):
        if isinstance(item, generations.Delta) and item.text:
            first = first or time.monotonic()
            text += item.text
        elif isinstance(item, generations.Ended):
            outcome = item.outcome
        elif isinstance(item, generations.Broken):
            raise RuntimeError(item.error.message)
    ended = time.monotonic()
    return {
        "ttft_ms": (first - submitted) * 1000 if first else float("nan"),
        "total_ms": (ended - submitted) * 1000,
        "cut": outcome is not None and outcome.status == "filtered",
        "text": text,
        "tokens": outcome.usage.completion_tokens if outcome else 0,
    }


def _run(pool: str, prompts: list[str], max_tokens: int, user) -> dict[str, list]:
    from django.test import override_settings

    rows: dict[str, list] = {}
    for mode in MODES:
        overrides = {"SAFETY_OUTPUT_ENABLED": mode != "off"}
        if mode != "off":
            overrides["SAFETY_OUTPUT_MODE"] = mode
        with override_settings(**overrides):
            rows[mode] = [
                asyncio.run(_one(p, pool=pool, max_tokens=max_tokens, user=user))
                for p in prompts
            ]
    return rows


def _workers(env: dict) -> list[subprocess.Popen]:
    manage = [sys.executable, "manage.py", "run_inference_worker"]
    commands = [
        [
            "--engine",
            "scripted",
            "--pool",
            "bench-scripted",
            "--delay-ms",
            "25",
            "--script-text",
            SCRIPTED_ANSWER,
        ],
        # one core each: the model and the classifier's embeddings do not fight over
        # the same cores (on 2 cores, both at 2 threads made every check cost seconds)
        ["--engine", "llamacpp", "--pool", "bench-llm", "--threads", "1"],
        [
            "--engine",
            "sentence-transformers",
            "--pool",
            "bench-embed",
            "--threads",
            "1",
        ],
    ]
    return [
        spawn([*manage, *args], cwd=ROOT, env=env, stderr=True) for args in commands
    ]


def _false_cuts(texts: list[str]) -> tuple[int, int, list[str]]:
    """Replay ``texts`` through the output policy (hold, embedded classifier)."""
    from django.test import override_settings

    from safety.output import OutputModerator

    cut = flagged = 0
    notes = []
    with override_settings(SAFETY_OUTPUT_ENABLED=True, SAFETY_OUTPUT_MODE="hold"):
        for text in texts:
            moderator = OutputModerator(job_id=f"bench-{uuid.uuid4().hex}", user_id=0)
            step = moderator.feed(text)
            if not step.cut:
                step = moderator.finish()
            if step.cut:
                cut += 1
                notes.append(f"cut ({moderator.cut_by.category}): {text[:70]!r}")
            elif any(d.action == "flag" for d in moderator.decisions):
                flagged += 1
                notes.append(f"flagged: {text[:70]!r}")
    return cut, flagged, notes


def main() -> None:

    parser = option_parser(prompts=8, max_tokens=96)
    args = parser.parse_args()
    django_start({"LOG_LEVEL": "WARNING", "EMBEDDING_POOL": "bench-embed"})
    from django.conf import settings
    from django.contrib.auth import get_user_model

    from gateway.models import ModelPool, Plan, Subscription

    settings.EMBEDDING_POOL = "bench-embed"
    settings.SAFETY_BACKEND = "embedded"
    settings.SAFETY_FAIL_CLOSED = False
    settings.SAFETY_INPUT_ENABLED = False  # the cost measured is the output's alone

    user, _ = get_user_model().objects.get_or_create(username="bench-moderation")
    plan, _ = Plan.objects.get_or_create(name="bench-moderation")
    pools = []
    for name, model in (
        ("bench-scripted", "scripted-1"),
        ("bench-llm", "SmolLM2-135M-Instruct.Q4_1"),
    ):
        pool, _ = ModelPool.objects.get_or_create(name=name, defaults={"model": model})
        pools.append(pool)
    plan.allowed_pools.add(*pools)
    Subscription.objects.update_or_create(user=user, defaults={"plan": plan})

    # OpenMP threads that spin while idle would steal the other worker's core
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_WAIT_POLICY": "PASSIVE"}
    procs = _workers(env)
    try:
        served = ("bench-scripted", "bench-llm", "bench-embed")
        workers_wait(served, procs, timeout_s=180, poll_s=0.2)
        prompts = [
            MODERATION_PROMPTS[i % len(MODERATION_PROMPTS)] for i in range(args.prompts)
        ]
        results = {}
        for label, pool in (
            ("scripted, 25 ms/token", "bench-scripted"),
            ("SmolLM2-135M (llama.cpp)", "bench-llm"),
        ):
            asyncio.run(_one("warm up", pool=pool, max_tokens=8, user=user))
            results[label] = _run(pool, prompts, args.max_tokens, user)
        llm_answers = [
            r["text"]
            for rows in results["SmolLM2-135M (llama.cpp)"].values()
            for r in rows
        ]
        false = _false_cuts(ORDINARY_ANSWERS + llm_answers)
    finally:
        processes_stop(procs, timeout_s=30)

    print()
    print(
        f"output moderation cost: {args.prompts} prompts per mode, one run each, "
        f"max {args.max_tokens} tokens, embedded classifier, "
        f"window <= {settings.SAFETY_OUTPUT_WINDOW_CHARS} chars (first "
        f"<= {settings.SAFETY_OUTPUT_FIRST_WINDOW_CHARS}), "
        f"{os.cpu_count()} cores"
    )
    header = (
        f"{'engine':26s} {'mode':8s} {'TTFT p50 ms':>12s} {'TTFT max':>9s} "
        f"{'total p50 ms':>13s} {'tokens p50':>10s} {'cut':>4s}"
    )
    print(header)
    print("-" * len(header))
    for label, rows_by_mode in results.items():
        for mode, rows in rows_by_mode.items():
            ttft = [r["ttft_ms"] for r in rows if r["ttft_ms"] == r["ttft_ms"]]
            print(
                f"{label:26s} {mode:8s} {_median(ttft):12.0f} "
                f"{max(ttft) if ttft else float('nan'):9.0f} "
                f"{_median([r['total_ms'] for r in rows]):13.0f} "
                f"{_median([r['tokens'] for r in rows]):10.0f} "
                f"{sum(r['cut'] for r in rows):4d}"
            )
            shape = f"{label}, mode {mode}, {len(rows)} prompts"
            bench_record(
                bench="moderation",
                metric="TTFT p50",
                value=float(_median(ttft)),
                unit="ms",
                params=shape,
            )
            bench_record(
                bench="moderation",
                metric="total p50",
                value=float(_median([r["total_ms"] for r in rows])),
                unit="ms",
                params=shape,
            )
    for label, rows_by_mode in results.items():
        # per prompt: the same greedy answer in each mode, so the difference is the cost
        added = [
            h["ttft_ms"] - o["ttft_ms"]
            for o, h in zip(rows_by_mode["off"], rows_by_mode["hold"], strict=True)
            if h["ttft_ms"] == h["ttft_ms"] and o["ttft_ms"] == o["ttft_ms"]
        ]
        print(
            f"TTFT added by hold, {label}: p50 {_median(added):.0f} ms "
            f"(per prompt, hold - off; goal <= +300 ms)"
        )
        bench_record(
            bench="moderation",
            metric="TTFT added by hold p50",
            value=float(_median(added)),
            unit="ms",
            params=(
                f"{label}, {len(added)} prompts, first window "
                f"<= {settings.SAFETY_OUTPUT_FIRST_WINDOW_CHARS} chars"
            ),
            goal="<= +300 ms",
        )
    cut, flagged, notes = false
    total = len(ORDINARY_ANSWERS) + len(llm_answers)
    print()
    print(
        f"false cuts: {cut}/{total} ordinary answers cut ({100 * cut / total:.1f} %), "
        f"{flagged} flagged ({len(ORDINARY_ANSWERS)} written, {len(llm_answers)} by SmolLM2)"
    )
    for note in notes:
        print(f"  {note}")
    bench_record(
        bench="moderation",
        metric="false cuts",
        value=cut,
        unit=f"of {total}",
        params="ordinary answers, embedded classifier",
        goal="0",
    )


if __name__ == "__main__":
    main()
