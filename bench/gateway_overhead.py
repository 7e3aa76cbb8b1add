"""Overhead of our full API path vs LiteLLM proxy, both in front of the same upstream.

    .venv/bin/python bench/gateway_overhead.py [--concurrency 1 50] [--rounds 3]
        [--min-samples 40] [--moderation off|on] [--profile DIR]

The defaults (c = 1 and 50, at least 40 requests per target and level) are sized for
``make bench``: about 3 minutes on 2 cores at load average 7-9 (60 requests per
level); ``--concurrency 1 50 200 --min-samples 200`` is a big run.

Needs the dev services (`make migrate`) and, for the LiteLLM column, LiteLLM proxy in
its own venv: ``python3 -m venv .venv-litellm && .venv-litellm/bin/pip install
'litellm[proxy]'`` (never in requirements.txt); without it only ours is measured.

It starts:

- an upstream: a local OpenAI-compatible server (Starlette + uvicorn) that streams a
  fixed answer of ``--tokens`` chunks (``--token-ms`` apart) with a usage chunk;
- ours: daphne + ``run_inference_worker --engine openai`` (the worker reaches the
  upstream through inference/engines/openai.py), a throw-away user (``bench-api``) on an
  unlimited plan and a fresh API key: requests take the whole path (Bearer auth,
  routing, token reservation, admission, Redis queue, worker, Redis stream, settlement);
- LiteLLM proxy with one model routed to the upstream.

The same client (the official ``openai`` AsyncOpenAI, streaming) sends ``c`` concurrent
requests, ``--rounds`` times, to the upstream directly, to ours and to LiteLLM, the
targets interleaved round by round (load drifts on a shared machine hit all). Printed
per concurrency: TTFT p50/p99 (ms, to the first content delta), overhead = TTFT through
the gateway minus TTFT direct (p50/p99, ms), requests/s, the ratio of our overhead to
LiteLLM's (below 1: ours adds less) and of the requests/s, and our TTFT split into its
stages (:func:`stages`: admission, the queue hop to the worker, the engine, the relay).
Our processes run with DEBUG off, as in production. Input moderation is off by default,
as LiteLLM has none (``--moderation on`` adds an embedding worker: the production
path). ``--profile DIR`` runs daphne and the worker under cProfile (their event-loop
threads only: the sync admission step runs in a worker thread).
"""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("LOG_LEVEL", "WARNING")

from bench.boot import ROOT, django_start, option_parser  # noqa: E402
from bench.procs import (  # noqa: E402
    free_port,
    http_wait,
    processes_stop,
    profiled,
    spawn,
    workers_wait,
)
from bench.record import figures_record, pct  # noqa: E402

MODEL = "bench-fixed"
POOL = "bench-api"

# What one streamed completion gave: TTFT and total (ms), the completion id, and the
# epoch times (s) the request was sent and its first content delta arrived.
Sample = tuple[float, float, str, float, float]


async def one(client, model: str) -> Sample:
    """Stream one completion; return its :data:`Sample`."""
    sent = time.time()
    start = time.perf_counter()
    ttft = None
    first_at = 0.0
    cid = ""
    stream = await client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "Say the fixed answer."}],
        stream=True,
        max_tokens=256,
    )
    async for chunk in stream:
        cid = cid or chunk.id
        if ttft is None and chunk.choices and chunk.choices[0].delta.content:
            ttft = (time.perf_counter() - start) * 1000
            first_at = time.time()
    total = (time.perf_counter() - start) * 1000
    return (ttft if ttft is not None else total), total, cid, sent, first_at


def stages(samples: list[Sample]) -> dict[str, list[float]]:
    """Split each of our API's TTFTs into its stages (ms), from what Redis kept.

    admission: request sent -> job enqueued (``enqueued_at`` of the job kept for a
    fallback retry); to worker: -> the worker's ``meta`` event (queue hop and the
    worker's start); engine: -> the first ``token`` event (the upstream request and
    its first chunk, the upstream's own delay included); relay: -> the client read the
    first content delta. Stream entry ids carry milliseconds, so each stage is +-1 ms.
    """
    import json
    import uuid

    from inference import keys
    from inference.connections import redis_sync

    client = redis_sync()
    out: dict[str, list[float]] = {
        "admission": [],
        "to worker": [],
        "engine": [],
        "relay": [],
    }
    for _ttft, _total, cid, sent, first_at in samples:
        if not cid.startswith("chatcmpl-") or not first_at:
            continue
        job_id = str(uuid.UUID(cid.removeprefix("chatcmpl-")))
        raw = client.get(keys.job_key(job_id))
        entries = client.xrange(keys.gen_key(job_id))
        times = {}
        for entry_id, fields in entries:
            times.setdefault(fields.get("e"), int(entry_id.split("-")[0]) / 1000)
        if raw is None or "meta" not in times or "token" not in times:
            continue
        enqueued = float(json.loads(raw)["enqueued_at"])
        out["admission"].append((enqueued - sent) * 1000)
        out["to worker"].append((times["meta"] - enqueued) * 1000)
        out["engine"].append((times["token"] - times["meta"]) * 1000)
        out["relay"].append((first_at - times["token"]) * 1000)
    return out


async def run_levels(
    targets: dict[str, tuple[str, str]], model: str, concurrency: int, rounds: int
) -> dict[str, tuple[list[float], float, Counter[str]]]:
    """Interleaved rounds of ``concurrency`` concurrent streams against each target.

    Each round runs every target once, in an order rotated from round to round, so a
    drift in machine load hits all targets alike. One client (and connection pool) per
    target, warmed up first. Returns per target: TTFTs (ms), requests/s over the time
    spent on that target, errors by kind.
    """
    import httpx
    import openai

    clients = {
        name: openai.AsyncOpenAI(
            base_url=url,
            api_key=key,
            max_retries=0,
            http_client=httpx.AsyncClient(
                limits=httpx.Limits(max_connections=concurrency + 10),
                timeout=httpx.Timeout(300),
            ),
        )
        for name, (url, key) in targets.items()
    }
    ttfts: dict[str, list[float]] = {name: [] for name in targets}
    samples: dict[str, list[Sample]] = {name: [] for name in targets}
    errors: dict[str, Counter[str]] = {name: Counter() for name in targets}
    busy_s = dict.fromkeys(targets, 0.0)
    for client in clients.values():  # warm up
        await asyncio.gather(
            *(one(client, model) for _ in range(min(concurrency, 5))),
            return_exceptions=True,
        )
    names = list(targets)
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            started = time.perf_counter()
            results = await asyncio.gather(
                *(one(clients[name], model) for _ in range(concurrency)),
                return_exceptions=True,
            )
            busy_s[name] += time.perf_counter() - started
            for result in results:
                if isinstance(result, BaseException):
                    kind = f"{type(result).__name__}: {str(result)[:100]}"
                    errors[name][kind] += 1
                else:
                    ttfts[name].append(result[0])
                    samples[name].append(result)
    for client in clients.values():
        await client.close()
    return {
        name: (
            ttfts[name],
            len(ttfts[name]) / busy_s[name],
            errors[name],
            samples[name],
        )
        for name in targets
    }


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


def _report(c: int, rows: dict, rounds: int) -> None:
    """Print one concurrency level's table rows and record its headline figures."""
    base50 = pct(rows["direct"][0], 50)
    base99 = pct(rows["direct"][0], 99)
    overhead = {}
    params = f"c={c}, {rounds} rounds"
    for name, (ttfts, rps, errors, _samples) in rows.items():
        p50, p99 = pct(ttfts, 50), pct(ttfts, 99)
        overhead[name] = (p50 - base50, p99 - base99)
        print(
            f"{c:>5} {name:>8} {p50:>9.1f} {p99:>9.1f} "
            f"{p50 - base50:>8.1f} {p99 - base99:>8.1f} {rps:>7.1f} "
            f"{sum(errors.values()):>6}"
        )
        for kind, count in errors.most_common(3):
            print(f"{'':>15} {count} x {kind}")
        if name != "direct":
            figures = [
                (f"{name} TTFT overhead p50", p50 - base50, "ms", ""),
                (f"{name} errors", sum(errors.values()), "", "0"),
            ]
            figures_record(bench="gateway_overhead", params=params, figures=figures)
    split = stages(rows["ours"][3])
    if split["admission"]:
        print(
            f"{c:>5}     ours TTFT by stage, p50 ms: "
            + ", ".join(f"{k} {pct(v, 50):.1f}" for k, v in split.items())
            + f" (the upstream's own TTFT, in engine: {base50:.1f} direct)"
        )
    if "litellm" in overhead:
        ours, theirs = overhead["ours"], overhead["litellm"]
        ratio50 = ours[0] / theirs[0] if theirs[0] > 0 else float("nan")
        ratio99 = ours[1] / theirs[1] if theirs[1] > 0 else float("nan")
        rps_ratio = rows["ours"][1] / rows["litellm"][1]
        print(
            f"{c:>5}    ours/litellm: overhead p50 {ratio50:.2f}, p99 {ratio99:.2f}; "
            f"requests/s {rps_ratio:.2f}x"
        )
        goal = "<= 0.5" if c == 1 else "<= 0.3"
        figures = [
            ("overhead ratio ours/litellm p50", ratio50, "", goal),
            ("requests/s ratio ours/litellm", rps_ratio, "x", ">= 2" if c > 1 else ""),
        ]
        figures_record(bench="gateway_overhead", params=params, figures=figures)


def main() -> None:
    parser = option_parser(concurrency=[1, 50])
    parser.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="rounds per level; at least enough for --min-samples requests per target",
    )
    parser.add_argument("--min-samples", type=int, default=40)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--token-ms", type=float, default=5.0)
    parser.add_argument(
        "--moderation",
        choices=("off", "on"),
        default="off",
        help="input moderation of our API (off: like LiteLLM, which has none; on: "
        "with an embedding worker, as in production)",
    )
    parser.add_argument(
        "--profile",
        type=Path,
        default=None,
        help="a folder: run daphne and the worker under cProfile, write "
        "web.prof / worker.prof there (figures are then not comparable)",
    )
    args = parser.parse_args()

    env = {
        **os.environ,
        "BENCH_TOKENS": str(args.tokens),
        "BENCH_TOKEN_MS": str(args.token_ms),
        "PYTHONUNBUFFERED": "1",
        "HF_HUB_OFFLINE": "1",
        # as in production: no per-query debug bookkeeping in our processes
        "DJANGO_DEBUG": "0",
        "SAFETY_INPUT_ENABLED": "1" if args.moderation == "on" else "0",
    }
    os.environ.update({k: env[k] for k in ("DJANGO_DEBUG", "SAFETY_INPUT_ENABLED")})
    key = setup_ours()
    bin_dir = Path(sys.executable).parent
    tmp = Path(tempfile.mkdtemp(prefix="bench-gw-"))
    up_port, web_port, llm_port = free_port(), free_port(), free_port()
    upstream = f"http://127.0.0.1:{up_port}"
    profile = args.profile
    if profile is not None:
        profile.mkdir(parents=True, exist_ok=True)
    worker = [sys.executable, "manage.py", "run_inference_worker"]
    procs: list[subprocess.Popen] = []
    try:
        uvicorn = [bin_dir / "uvicorn", "bench.upstream:app", "--port", str(up_port)]
        uvicorn += ["--log-level", "warning", "--no-access-log"]
        procs.append(spawn(uvicorn, cwd=ROOT, env=env))
        daphne = [bin_dir / "daphne", "-b", "127.0.0.1", "-p", str(web_port)]
        daphne += ["chatsite.asgi:application"]
        web_prof = profile / "web.prof" if profile else None
        procs.append(spawn(profiled(daphne, web_prof), cwd=ROOT, env=env))
        chat = [*worker, "--pool", POOL, "--engine", "openai", "--base-url", upstream]
        chat += ["--model", MODEL, "--concurrency", str(max(args.concurrency) + 8)]
        worker_prof = profile / "worker.prof" if profile else None
        procs.append(spawn(profiled(chat, worker_prof), cwd=ROOT, env=env))
        if args.moderation == "on":
            embed = [*worker, "--pool", "embed", "--engine", "sentence-transformers"]
            procs.append(spawn(embed, cwd=ROOT, env=env))
        litellm, litellm_key = litellm_start(tmp, env, port=llm_port, upstream=upstream)
        procs += [litellm] if litellm else []
        http_wait(upstream + "/v1/models", procs)
        http_wait(f"http://127.0.0.1:{web_port}/login/", procs)
        if litellm:
            http_wait(f"http://127.0.0.1:{llm_port}/health/liveliness", procs)
        pools = [POOL] + (["embed"] if args.moderation == "on" else [])
        workers_wait(pools, procs, timeout_s=60)
        targets = {
            "direct": (upstream + "/v1", "none"),
            "ours": (f"http://127.0.0.1:{web_port}/v1", key),
        }
        if litellm:
            targets["litellm"] = (f"http://127.0.0.1:{llm_port}", litellm_key)
        print(
            f"upstream: {args.tokens} chunks, {args.token_ms} ms apart; input "
            f"moderation {args.moderation}; at least {args.min_samples} requests "
            f"per target and level; TTFT in ms; load average {os.getloadavg()[0]:.2f}"
        )
        print(
            f"{'conc':>5} {'target':>8} {'ttft p50':>9} {'ttft p99':>9} "
            f"{'ovh p50':>8} {'ovh p99':>8} {'req/s':>7} {'errors':>6}"
        )
        for c in args.concurrency:
            rounds = max(args.rounds, -(-args.min_samples // c))
            rows = asyncio.run(run_levels(targets, MODEL, c, rounds))
            _report(c, rows, rounds)
        print(f"load average after: {os.getloadavg()[0]:.2f}")
    finally:
        processes_stop(procs, timeout_s=20)
        shutil.rmtree(tmp, ignore_errors=True)


def litellm_start(
    tmp: Path, env: dict[str, str], *, port: int, upstream: str
) -> tuple[subprocess.Popen | None, str]:
    """Start LiteLLM proxy on ``port`` with one model routed to ``upstream`` (its
    config written in ``tmp``); return the process (None where the LiteLLM venv is
    missing) and its master key."""
    litellm_bin = ROOT / ".venv-litellm" / "bin" / "litellm"
    key = "sk-" + secrets.token_hex(32)
    if not litellm_bin.exists():
        return None, key
    # no database for LiteLLM (our DATABASE_URL would make it start Prisma), and its
    # bundled model cost map (no fetch)
    litellm_env = {
        k: v for k, v in env.items() if k not in ("DATABASE_URL", "REDIS_URL")
    }
    litellm_env.update(LITELLM_LOG="ERROR", LITELLM_LOCAL_MODEL_COST_MAP="True")
    (tmp / "litellm.yaml").write_text(
        "model_list:\n"
        f"  - model_name: {MODEL}\n"
        "    litellm_params:\n"
        f"      model: openai/{MODEL}\n"
        f"      api_base: {upstream}/v1\n"
        "      api_key: none\n"
        "litellm_settings:\n"
        "  drop_params: true\n"
        "general_settings:\n"
        f"  master_key: {key}\n"
    )
    argv = [litellm_bin, "--config", tmp / "litellm.yaml"]
    argv += ["--port", str(port), "--host", "127.0.0.1"]
    return spawn(argv, cwd=tmp, env=litellm_env), key


if __name__ == "__main__":
    main()
