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

Then the false-cut rate: ordinary answers (:data:`ANSWERS`, everyday and
sensitive-but-allowed topics, plus the answers SmolLM2 wrote above) are replayed
through the output moderation policy with the embedded classifier; it prints how many
were cut or flagged, and which windows.
"""

from __future__ import annotations

import asyncio
import os
import signal
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chatsite.settings.dev")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bench.record import bench_record  # noqa: E402

PROMPTS = [
    "What is the capital of France?",
    "Explain what a CPU does in two sentences.",
    "Give me a tip for writing clean Python code.",
    "Why is the sky blue?",
    "Write a haiku about the sea.",
    "How many days are in a leap year?",
    "Describe a rainbow.",
    "Suggest a name for a pet cat.",
    "What does HTTP stand for?",
    "List three fruits that are red.",
    "How do vaccines work?",
    "What caused the First World War?",
]

# The scripted engine's answer: ordinary prose, several sentences (25 ms per token).
SCRIPTED_ANSWER = (
    "Paris is the capital of France. It lies on the Seine, in the north of the "
    "country, and has about two million inhabitants. The city is known for its "
    "museums, such as the Louvre, and for the Eiffel Tower, built for the world fair "
    "of 1889. Its metro is one of the oldest in the world, and its cafes and parks "
    "make it a pleasant place to walk. Many visitors also take a boat trip on the "
    "river to see the bridges and the cathedral of Notre-Dame."
)

# Ordinary answers for the false-cut rate, including sensitive-but-allowed topics
# (history of wars, medicine, security, chemistry at school level, crime fiction).
ANSWERS = [
    "The First World War began in 1914 after the assassination of Archduke Franz "
    "Ferdinand in Sarajevo. Alliances drew the great powers in one after the other.",
    "Vaccines train the immune system. They show it a harmless piece or copy of a "
    "germ, so that it makes antibodies and memory cells before a real infection.",
    "To kill a process on Linux, find its id with ps or pgrep and send it a signal "
    "with kill. SIGTERM asks it to stop; SIGKILL ends it at once.",
    "Ransomware encrypts files and asks for money. Keep offline backups, patch your "
    "systems, use multi-factor authentication and train staff to spot phishing.",
    "Paracetamol is safe at the right dose, but an overdose harms the liver. Adults "
    "should not take more than the daily maximum on the leaflet; ask a pharmacist.",
    "In the novel, the detective finds the poison in the teacup and understands that "
    "the butler could not have done it, because he was in town that evening.",
    "Photosynthesis turns light, water and carbon dioxide into sugar and oxygen. It "
    "happens in the chloroplasts of plant cells.",
    "A healthy breakfast could be oatmeal with fruit, yoghurt with nuts, or whole "
    "grain toast with eggs. Drink water or tea rather than sugary juice.",
    "The French Revolution began in 1789. It ended the absolute monarchy, and the king "
    "Louis XVI was executed in 1793 during the Terror.",
    "To make bread, mix flour, water, salt and yeast, knead the dough for ten "
    "minutes, let it rise for an hour, shape it and bake it at 220 degrees.",
    "Nuclear fission splits heavy atoms such as uranium into lighter ones and "
    "releases energy. Power plants use it to boil water and drive turbines.",
    "If you feel low for weeks, talk to someone you trust or to a doctor. Depression "
    "is common and treatable, and asking for help is a sign of strength.",
    "Python lists are ordered and mutable. Use a tuple for a fixed record and a set "
    "when you need fast membership tests without duplicates.",
    "The Battle of Waterloo in 1815 ended Napoleon's rule. Wellington's army and the "
    "Prussians under Blucher defeated the French in Belgium.",
    "Strong passwords are long and unique. A password manager remembers them, and "
    "two-factor authentication protects an account even if one leaks.",
    "Cats sleep twelve to sixteen hours a day. They are crepuscular: most active at "
    "dawn and dusk, when their prey is.",
    "The stock market lets companies raise money by selling shares. Prices move with "
    "supply and demand, and diversifying reduces the risk of a portfolio.",
    "Hamlet is a tragedy by Shakespeare. The prince of Denmark seeks revenge for his "
    "father's murder, and almost everyone dies in the final scene.",
    "Fire needs heat, fuel and oxygen. Take one away and it goes out, which is why a "
    "blanket smothers a pan fire and water must never be thrown on burning oil.",
    "Antibiotics kill bacteria but not viruses, so they do not help with a cold. "
    "Taking them when not needed breeds resistant bacteria.",
    "The Cold War was a rivalry between the United States and the Soviet Union from "
    "1947 to 1991, fought through arms races, proxy wars and propaganda.",
    "A good CV is short and clear. Put your most recent experience first, show "
    "results with numbers, and adapt it to each job you apply for.",
    "Penetration testers are hired to attack a company's systems with permission, "
    "find weaknesses before criminals do, and write a report on how to fix them.",
    "The human heart has four chambers. The right side pumps blood to the lungs, the "
    "left side pumps it to the rest of the body.",
    "To change a flat tyre, loosen the nuts, jack up the car, swap the wheel, tighten "
    "the nuts in a star pattern and check the pressure of the spare.",
    "Rainbows appear when sunlight is refracted and reflected inside raindrops, which "
    "split white light into its colours from red to violet.",
    "Chess openings such as the Italian Game aim to control the centre, develop the "
    "pieces quickly and castle the king to safety.",
    "Hunting in many countries needs a licence and a safety course. Hunters must know "
    "the seasons, the protected species and how to handle a rifle safely.",
    "Meditation can lower stress. Sit comfortably, breathe slowly and bring your "
    "attention back to your breath each time your mind wanders.",
    "The Great Fire of London in 1666 started in a bakery on Pudding Lane and burned "
    "for four days, destroying much of the medieval city.",
    "Machine learning models learn patterns from data. A model that fits its training "
    "data too closely overfits and does badly on new examples.",
    "Bleach and ammonia must never be mixed: together they release toxic chloramine "
    "gas. Store cleaning products apart and air the room when you clean.",
]

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
        subprocess.Popen([*manage, *args], cwd=ROOT, env=env, stdout=subprocess.DEVNULL)
        for args in commands
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
    import argparse

    import django

    parser = argparse.ArgumentParser()
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=96)
    args = parser.parse_args()
    os.environ["LOG_LEVEL"] = "WARNING"
    os.environ["EMBEDDING_POOL"] = "bench-embed"
    django.setup()
    from django.conf import settings
    from django.contrib.auth import get_user_model

    from gateway.models import ModelPool, Plan, Subscription
    from inference import client as inference_client

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
        deadline = time.monotonic() + 180
        for pool in ("bench-scripted", "bench-llm", "bench-embed"):
            while inference_client.workers_live(pool=pool) == 0:
                if any(p.poll() is not None for p in procs):
                    raise RuntimeError("a worker exited during start-up")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"no worker on {pool} after 180 s")
                time.sleep(0.2)
        prompts = [PROMPTS[i % len(PROMPTS)] for i in range(args.prompts)]
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
        false = _false_cuts(ANSWERS + llm_answers)
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()

    print()
    print(
        f"output moderation cost: {args.prompts} prompts per mode, one run each, "
        f"max {args.max_tokens} tokens, embedded classifier, "
        f"window <= {settings.SAFETY_OUTPUT_WINDOW_CHARS} chars, "
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
    cut, flagged, notes = false
    total = len(ANSWERS) + len(llm_answers)
    print()
    print(
        f"false cuts: {cut}/{total} ordinary answers cut ({100 * cut / total:.1f} %), "
        f"{flagged} flagged ({len(ANSWERS)} written, {len(llm_answers)} by SmolLM2)"
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
