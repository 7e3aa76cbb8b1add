"""Input moderation's own cost on an API request, apart from the rest of admission.

    .venv/bin/python bench/api_moderation_cost.py [--n 60]

Runs on the dev services (`make migrate` first) and starts an embedding worker (the
classifier embeds through the inference tier). Times, in this process, the input check
an API request's admission runs (:func:`gateway.generations.admission.input_check`:
every client-written message screened, as ``/v1/chat/completions`` does) on a
one-message request:

- hit: the same text again (its verdict is in the verdict cache: one Redis MGET);
- miss: a text never seen (an embedding request to the worker and the classifier).

Prints p50/p99 (ms, wall) and this process's CPU per check (ms); records the p50s.
Pinned like bench/gateway_overhead.py (``--pin on``): this process on the web core,
the worker, Redis and PostgreSQL on the other.
"""

from __future__ import annotations

import os
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("LOG_LEVEL", "WARNING")

from bench.boot import ROOT, django_start, option_parser  # noqa: E402
from bench.pinning import pinning_plan, service_pids  # noqa: E402
from bench.procs import processes_stop, spawn, workers_wait  # noqa: E402
from bench.record import figures_record, pct  # noqa: E402

GOALS = {"hit": "<= 3 ms", "miss": "<= 15 ms"}
WORDS = "river lamp cedar orbit velvet harbor maple quartz meadow ember signal".split()


def _text(i: int) -> str:
    """A plain question no earlier run asked (the verdict cache keys on the text)."""
    tag = uuid.uuid4().int
    picked = " ".join(WORDS[(tag >> (4 * k)) % len(WORDS)] for k in range(6))
    return f"Could you tell me about the {picked} in story {i} ({tag % 10**8})?"


def measure(n: int, pin: bool = True) -> dict[str, dict[str, float]]:
    """Start an embedding worker, time ``n`` verdict-cache hits and ``n`` misses;
    return ``{"hit"|"miss": {"p50", "p99", "cpu"}}`` (ms) and ``"pinning"``."""
    pinning = pinning_plan(pin)
    for pid in service_pids(ROOT / ".var").values():
        pinning.pin_tree(pid, web=False)
    env = {**os.environ, "SAFETY_INPUT_ENABLED": "1", "HF_HUB_OFFLINE": "1"}
    django_start({"SAFETY_INPUT_ENABLED": "1"})
    from django.conf import settings
    from django.contrib.auth import get_user_model

    settings.SAFETY_INPUT_ENABLED = True  # also when Django was set up without it

    from gateway import generations
    from gateway.generations.admission import input_check
    from inference.embeddings import TextVector

    cmd = [sys.executable, "manage.py", "run_inference_worker", "--pool", "embed"]
    cmd += ["--engine", "sentence-transformers"]
    worker = spawn(cmd, cwd=ROOT, env=env)
    pinning.pin(worker.pid, web=False)
    pinning.pin(os.getpid(), web=True)
    user, _ = get_user_model().objects.get_or_create(username="bench-moderation")

    def check(text: str) -> tuple[float, float]:
        messages = [{"role": "user", "content": text}]
        request = generations.GenerationRequest(
            user=user,
            messages=messages,
            params={"max_tokens": 64},
            surface=generations.Surface.API,
            query=TextVector(text),
            client_authored=True,
        )
        wall, cpu = time.perf_counter(), time.process_time()
        input_check(request, job_id=uuid.uuid4().hex)
        return (time.perf_counter() - wall) * 1e3, (time.process_time() - cpu) * 1e3

    out: dict[str, dict[str, float]] = {}
    try:
        workers_wait(["embed"], [worker], timeout_s=180)
        for i in range(3):  # warm: the classifier, connections
            check(_text(i))
        seen = _text(-1)
        check(seen)
        for kind in ("hit", "miss"):
            walls, cpus = [], []
            for i in range(n):
                wall, cpu = check(seen if kind == "hit" else _text(i))
                walls.append(wall)
                cpus.append(cpu)
            out[kind] = {
                "p50": pct(walls, 50),
                "p99": pct(walls, 99),
                "cpu": sum(cpus) / len(cpus),
            }
    finally:
        processes_stop([worker], timeout_s=20)
    out["pinning"] = {"describe": pinning.describe()}  # type: ignore[dict-item]
    return out


def moderation_rows(n: int, pin: bool = True) -> list[dict]:
    """:func:`measure` as the web tier table's rows (``measure``, ``value``,
    ``unit``, ``pinning``, ``params``, ``goal``), verdict cache hit and miss apart."""
    out = measure(n, pin=pin)
    pinning = out["pinning"]["describe"]
    params = f"n={n}, one user message, in-process input check"
    return [
        {
            "measure": "input moderation's own cost on an API request p50, "
            f"verdict cache {kind}",
            "value": out[kind]["p50"],
            "unit": "ms",
            "pinning": pinning,
            "params": f"{params}; CPU {out[kind]['cpu']:.2f} ms per check",
            "goal": GOALS[kind],
        }
        for kind in ("hit", "miss")
    ]


def main() -> None:
    args = option_parser(n=60, pin="on").parse_args()
    out = measure(args.n, pin=args.pin == "on")
    pinning = out["pinning"]["describe"]
    params = f"n={args.n}, one user message, {pinning}, in-process"
    for kind in ("hit", "miss"):
        row = out[kind]
        print(
            f"input moderation, verdict cache {kind}: p50 {row['p50']:.2f} ms, "
            f"p99 {row['p99']:.2f} ms, CPU {row['cpu']:.2f} ms per check ({params}; "
            f"load average {os.getloadavg()[0]:.2f})"
        )
        figures_record(
            bench="api_moderation_cost",
            params=params,
            figures=[
                (f"input moderation p50, cache {kind}", row["p50"], "ms", GOALS[kind]),
                (f"input moderation CPU, cache {kind}", row["cpu"], "ms", ""),
            ],
        )


if __name__ == "__main__":
    main()
