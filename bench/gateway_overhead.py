"""Overhead of our full API path vs LiteLLM proxy, both in front of the same upstream.

    .venv/bin/python bench/gateway_overhead.py [--concurrency 1 50] [--rounds 3]
        [--min-samples 40] [--moderation off|on] [--profile DIR] [--py-spy PREFIX]

The defaults (c = 1 and 50, at least 40 requests per target and level) are sized for
``make bench``: about 3 minutes on 2 cores at load average 7-9 (60 requests per
level); ``--concurrency 1 50 200 --min-samples 200`` is a big run.

Needs the dev services (`make migrate`) and, for the LiteLLM column, LiteLLM proxy in
its own venv: ``python3 -m venv .venv-litellm && .venv-litellm/bin/pip install
'litellm[proxy]'`` (never in requirements.txt); without it only ours is measured.

It starts:

- an upstream: a local OpenAI-compatible server (bench/upstream.py: raw asyncio,
  pre-encoded chunks) that streams a fixed answer of ``--tokens`` chunks
  (``--token-ms`` apart) with a usage chunk;
- ours: the web process as deployed (:func:`tests.stack.web_argv`; ``--server
  daphne``: daphne) + ``run_inference_worker --engine openai`` (to the upstream through
  inference/engines/openai.py), a throw-away user (``bench-api``) on an unlimited plan
  and a fresh API key: requests take the whole path (Bearer auth, routing, token
  reservation, admission, Redis queue, worker, Redis stream, settlement);
- LiteLLM proxy with one model routed to the upstream.

The same client sends ``c`` concurrent streamed requests, ``--rounds`` times, to the
upstream directly, to ours and to LiteLLM, the targets interleaved round by round
(load drifts on a shared machine hit all). Which client (``--client``, said in every
figure's params): by default the official ``openai`` AsyncOpenAI at c=1 (what users
run) and above it the light raw-socket client of bench/sse_client.py (the same
request, the SSE read until ``[DONE]``, TTFT at the first content delta), whose
cost at c=50 is a fraction of the official one's on the load core. Printed
per concurrency: TTFT p50/p99 (ms, to the first content delta), overhead = TTFT through
the gateway minus TTFT direct (p50/p99, ms), requests/s, the ratio of our overhead to
LiteLLM's (below 1: ours adds less) and of the requests/s, and our TTFT split into its
stages (:func:`stages`: client, admission, to worker, engine, relay).
Our processes run with DEBUG off, as in production. Input moderation is off by default,
as LiteLLM has none (``--moderation on`` adds an embedding worker: the production path).
``--profile DIR`` runs the web process and the worker under cProfile (their event-loop
threads only); ``--py-spy PREFIX`` samples it with py-spy during each level
(:func:`bench.overhead_levels.level_run`).

Pinned (``--pin on``, the default on a machine with two cores or more,
:mod:`bench.pinning`): the web process and LiteLLM's proxy on the first core,
everything else (this client, the upstream, the worker, Redis, PostgreSQL) on the second; the two servers are measured in turns, so each has the web core to
itself. Beside the wall-clock figures each server's own CPU per request (ms, from
/proc: its processes' user + system time over its rounds) is printed; every figure
says how it was pinned. The load side's use is printed per level and target
(:mod:`bench.load_side`: the load core's busy share from /proc/stat, and the CPU per
request of the client, the upstream, the worker, Redis and PostgreSQL, and the run-queue
wait of the harness: this client and the upstream); a level whose load core was at
least 90% busy for a target while the harness waited for the CPU a tenth of the time
or more is marked load-bound: its wall-clock figures are no verdict on the gateway. Beside the measured requests/s ratio, a
derived one that does not depend on the load core: requests/s per web core, 1 / web
CPU per request, ours over LiteLLM's. :func:`hot_path_rows` runs it and returns the
web tier table's API rows.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("LOG_LEVEL", "WARNING")

from bench.boot import ROOT, django_start  # noqa: E402
from bench.load_side import LOAD_SATURATED  # noqa: E402
from bench.overhead_levels import (  # noqa: E402
    GOALS,
    Target,
    client_for,
    level_run,
    litellm_start,
    ours_argv,
)
from bench.overhead_levels import overhead_parser as parser  # noqa: E402
from bench.overhead_report import level_report  # noqa: E402
from bench.pinning import pinning_plan, service_pids  # noqa: E402
from bench.procs import (  # noqa: E402
    free_port,
    http_wait,
    processes_stop,
    profiled,
    spawn,
    workers_wait,
)

MODEL = "bench-fixed"  # the upstream's model (LiteLLM's model id)
POOL = "bench-api"  # our pool in front of it (our API's model id)


def setup_ours() -> str:
    """Create the bench user, an unlimited plan, the pool and a fresh API key."""
    django_start()
    from bench.users import plan_user, pool_upsert
    from gateway import services
    from gateway.models import ModelPool

    pool = pool_upsert(
        POOL,
        model=MODEL,
        engine=ModelPool.Engine.OPENAI,
        queue_threshold=100_000,
        max_output_tokens=4096,
        enabled=True,
    )
    plan = {"priority": 100}
    user = plan_user("bench-api", plan="bench-api", pools=[pool], plan_defaults=plan)
    return services.api_key_create(user=user, name="bench")[1]


def run(args: argparse.Namespace) -> dict[int, dict]:
    """Start the servers, measure every ``args.concurrency`` level, stop them;
    return each level's figures (:func:`_report`)."""
    env = {
        **os.environ,
        "BENCH_TOKENS": str(args.tokens),
        "BENCH_TOKEN_MS": str(args.token_ms),
        "PYTHONUNBUFFERED": "1",
        "HF_HUB_OFFLINE": "1",
        # as in production: no per-query debug bookkeeping
        "DJANGO_DEBUG": "0",
        "SAFETY_INPUT_ENABLED": "1" if args.moderation == "on" else "0",
        # like for like: LiteLLM holds no text back; "on" is the product's default
        # (hold mode: the first token waits for its window's verdict)
        "SAFETY_OUTPUT_ENABLED": "1" if args.output_moderation == "on" else "0",
    }
    os.environ.update(
        {
            k: env[k]
            for k in ("DJANGO_DEBUG", "SAFETY_INPUT_ENABLED", "SAFETY_OUTPUT_ENABLED")
        }
    )
    pinning = pinning_plan(args.pin == "on")
    # this client and every process it starts run on the load core, unless pinned
    # to the web core below
    pinning.pin(os.getpid(), web=False)
    key = setup_ours()  # loads the settings: which services (.var/ or .var/test/)
    from chatsite.settings.environment import SERVICES_DIR

    for pid in service_pids(SERVICES_DIR).values():
        pinning.pin_tree(pid, web=False)
    tmp = Path(tempfile.mkdtemp(prefix="bench-gw-"))
    up_port, web_port, llm_port = free_port(), free_port(), free_port()
    upstream = f"http://127.0.0.1:{up_port}"
    profile = args.profile
    if profile is not None:
        profile.mkdir(parents=True, exist_ok=True)
    worker = [sys.executable, "manage.py", "run_inference_worker"]
    if args.worker_loop == "uvloop":
        worker[1:1] = ["bench/uvloop_main.py"]
    procs: list[subprocess.Popen] = []
    results = {}
    try:
        up = spawn(
            [sys.executable, "bench/upstream.py", "--port", str(up_port)],
            cwd=ROOT,
            env=env,
        )
        procs.append(up)
        web_prof = profile / "web.prof" if profile else None
        web = spawn(
            profiled(ours_argv(args.server, web_port), web_prof), cwd=ROOT, env=env
        )
        pinning.pin(web.pid, web=True)
        procs.append(web)
        chat = [*worker, "--pool", POOL, "--engine", "openai", "--base-url", upstream]
        chat += ["--model", MODEL, "--concurrency", str(max(args.concurrency) + 8)]
        worker_prof = profile / "worker.prof" if profile else None
        chat_worker = spawn(profiled(chat, worker_prof), cwd=ROOT, env=env)
        procs.append(chat_worker)
        if args.moderation == "on":
            embed = [*worker, "--pool", "embed", "--engine", "sentence-transformers"]
            procs.append(spawn(embed, cwd=ROOT, env=env))
        litellm, litellm_key = litellm_start(
            tmp, env, port=llm_port, upstream=upstream, model=MODEL
        )
        procs += [litellm] if litellm else []
        http_wait(upstream + "/v1/models", procs)
        http_wait(f"http://127.0.0.1:{web_port}/login/", procs)
        if litellm:
            http_wait(f"http://127.0.0.1:{llm_port}/health/liveliness", procs)
        pools = [POOL] + (["embed"] if args.moderation == "on" else [])
        workers_wait(pools, procs, timeout_s=60)
        pinning.pin(web.pid, web=True)  # threads started since
        targets = {
            "direct": Target(upstream + "/v1", "none", MODEL),
            "ours": Target(f"http://127.0.0.1:{web_port}/v1", key, POOL, [web.pid]),
        }
        if litellm:
            pinning.pin_tree(litellm.pid, web=True)
            targets["litellm"] = Target(
                f"http://127.0.0.1:{llm_port}", litellm_key, MODEL, [litellm.pid]
            )
        print(
            f"upstream: {args.tokens} chunks, {args.token_ms} ms apart; input "
            f"moderation {args.moderation}, output moderation {args.output_moderation}; worker loop {args.worker_loop}; at least {args.min_samples} requests "
            f"per target and level; TTFT in ms; {pinning.describe()}; "
            f"load average {os.getloadavg()[0]:.2f}"
        )
        print(
            f"{'conc':>5} {'target':>8} {'ttft p50':>9} {'ttft p99':>9} "
            f"{'ovh p50':>8} {'ovh p99':>8} {'req/s':>7} {'errors':>6} {'cpu/req':>8} {'net/req':>8}"
        )
        # the load side's processes, each counted with its children
        load_parts = {
            "client": os.getpid(),
            "upstream": up.pid,
            "worker": chat_worker.pid,
            **service_pids(SERVICES_DIR),
        }
        cores = (min(pinning.web), min(pinning.load)) if pinning.active else None
        for c in args.concurrency:
            rounds = max(args.rounds, -(-args.min_samples // c))
            rows = level_run(
                targets,
                c,
                rounds,
                spy=args.py_spy,
                spy_pids={
                    name: load_parts.get(name, web.pid) for name in args.py_spy_of
                },
                client=client_for(args.client, c),
                cores=cores,
                load_parts=load_parts,
            )
            results[c] = level_report(c, rows, rounds, pinning)
        print(f"load average after: {os.getloadavg()[0]:.2f}")
    finally:
        processes_stop(procs, timeout_s=20)
        shutil.rmtree(tmp, ignore_errors=True)
    return results


def hot_path_rows(args: argparse.Namespace | None = None) -> list[dict]:
    """Run the benchmark (``args`` from :func:`parser`; None: ``--concurrency 1 50
    --min-samples 60 --moderation-cost 60``) and return the web tier table's API
    rows: dicts with ``measure``, ``value``, ``unit``, ``pinning``, ``params`` (the
    run's shape and the machine's load average) and ``goal``."""
    if args is None:
        args = parser().parse_args(
            [
                "--concurrency",
                "1",
                "50",
                "--min-samples",
                "60",
                "--moderation-cost",
                "60",
            ]
        )
    results = run(args)
    pinning = pinning_plan(args.pin == "on").describe()
    rows = []

    def row(
        measure: str, value: Any, unit: str, params: str, goal: str = "", bound=""
    ) -> None:
        rows.append(
            {
                "measure": measure,
                "value": value,
                "unit": unit,
                "pinning": pinning,
                "params": params,
                "goal": goal,
                # a figure of a load-bound level is no verdict on the gateway
                **({"bound": bound} if bound else {}),
            }
        )

    moderation = (
        f"input moderation {args.moderation}, output moderation "
        f"{args.output_moderation}"
    )
    for c, out in results.items():
        params = f"{out['params']}, {moderation}, client {out['client']}"
        params += f"; {out['load_said']}" if out["load_said"] else ""
        bound = out["bound"]
        row(
            f"API admission p50 at c={c}",
            out["admission"],
            "ms",
            params,
            GOALS.get(f"admission c={c}", ""),
            bound,
        )
        for name, share in out["load"].items():
            row(
                f"load core busy at c={c} ({name})",
                share,
                "share",
                params,
                f"< {LOAD_SATURATED}",
            )
        for name, (cpu, net) in out["cpu"].items():
            row(f"web CPU per API request ({name}) at c={c}", cpu, "ms", params)
            row(
                f"web CPU per API request ({name}) at c={c}, net of idle",
                net,
                "ms",
                params,
            )
        if "ratio50" in out:
            for measure, key, value in (
                (f"API added TTFT vs LiteLLM p50 at c={c}", "ratio p50", "ratio50"),
                (f"API added TTFT vs LiteLLM p99 at c={c}", "ratio p99", "ratio99"),
                (f"API requests/s vs LiteLLM at c={c}", "rps", "rps"),
            ):
                goal = GOALS.get(f"{key} c={c}", "")
                row(measure, out[value], "x", params, goal, bound)
        if "per_core" in out:
            ours, theirs = out["per_core"]["ours"], out["per_core"]["litellm"]
            derived = (
                f"derived, not measured: 1 / web CPU per request (ours {ours:.0f}, "
                f"LiteLLM {theirs:.0f} requests/s per web core), independent of the "
                f"load core; {params}"
            )
            row(
                f"API requests/s per web core vs LiteLLM at c={c}, derived",
                ours / theirs,
                "x",
                derived,
                GOALS.get(f"rps c={c}", ""),
            )
    return rows + _moderation_rows(args)


def _moderation_rows(args: argparse.Namespace) -> list[dict]:
    """bench/api_moderation_cost.py's rows (none without ``--moderation-cost``)."""
    if not args.moderation_cost:
        return []
    from bench.api_moderation_cost import moderation_rows

    return moderation_rows(args.moderation_cost, pin=args.pin == "on")


def main() -> None:
    args = parser().parse_args()
    run(args)
    for row in _moderation_rows(args):
        print(f"{row['measure']}: {row['value']:.2f} ms ({row['params']})")


if __name__ == "__main__":
    main()
