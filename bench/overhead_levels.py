"""The client side of bench/gateway_overhead.py: streamed requests in interleaved
rounds against each target, the CPU each target's server spent on them (from
``/proc``), our TTFT split into stages, and LiteLLM's start-up."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import secrets
import subprocess
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.boot import ROOT, option_parser
from bench.load_side import LoadUse
from bench.procs import spawn
from bench.procstat import proc_cpu_s

# The goals for the API rows (bench/gateway_overhead.py), by measure and level.
GOALS = {
    "admission c=1": "<= 3 ms",
    "admission c=50": "<= 60 ms",
    "ratio p50 c=1": "<= 0.6",
    "ratio p99 c=1": "<= 0.6",
    "ratio p50 c=50": "<= 0.2",
    "rps c=50": ">= 3",
}

# The processes --py-spy can sample.
SPIED = ("web", "client", "upstream", "worker")

# What one streamed completion gave: TTFT and total (ms), the completion id, and the
# epoch times (s) the request was made, its first content delta arrived, and its bytes
# began to go out (the HTTP client's request hook, after the client built it).
Sample = tuple[float, float, str, float, float, float]
# The request header carrying the request hook's time (epoch s) back to :func:`one`.
WIRE_HEADER = "x-bench-sent-at"


@dataclass
class Target:
    """One server the client measures: its base URL, API key and model id, and the
    pids of its server processes whose CPU counts as its own (none: not counted)."""

    url: str
    key: str
    model: str
    pids: list[int] = field(default_factory=list)


@dataclass
class Level:
    """One target's results at one concurrency: TTFTs (ms), requests/s over the time
    spent on that target, errors by kind, the samples, and its servers' CPU per
    request (ms; None when it has no server pid): all of it, and net of what the
    server burns idle over the same time (its timers and pollers); what the load
    side spent meanwhile (:class:`bench.load_side.LoadUse`) and which client sent
    the requests (``openai`` or ``raw``, :func:`client_for`)."""

    ttfts: list[float]
    rps: float
    errors: Counter[str]
    samples: list[Sample]
    cpu_ms: float | None
    cpu_net_ms: float | None = None
    load: LoadUse | None = None
    client: str = "openai"


async def idle_cpu_rates(
    targets: dict[str, Target], seconds: float = 3.0
) -> dict[str, float]:
    """Each target's server CPU (s) per second while no request runs."""
    before = {name: _cpu_s(t.pids) for name, t in targets.items()}
    await asyncio.sleep(seconds)
    return {
        name: (_cpu_s(t.pids) - before[name]) / seconds for name, t in targets.items()
    }


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
    wire = float(stream.response.request.headers.get(WIRE_HEADER, sent))
    async for chunk in stream:
        cid = cid or chunk.id
        if ttft is None and chunk.choices and chunk.choices[0].delta.content:
            ttft = (time.perf_counter() - start) * 1000
            first_at = time.time()
    total = (time.perf_counter() - start) * 1000
    return (ttft if ttft is not None else total), total, cid, sent, first_at, wire


async def _wire_stamp(request: Any) -> None:
    """httpx's request hook: stamp the time the request starts to go out."""
    request.headers[WIRE_HEADER] = repr(time.time())


def stages(samples: list[Sample]) -> dict[str, list[float]]:
    """Split each of our API's TTFTs into its stages (ms), from what Redis kept.

    client: the openai library builds the request, until its HTTP client starts to
    send it (the same for every target, on the load core); admission: -> job enqueued
    (``enqueued_at`` of the job kept for a fallback retry); to worker: -> the worker's ``meta`` event (queue hop and the
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
        "client": [],
        "admission": [],
        "to worker": [],
        "engine": [],
        "relay": [],
    }
    for _ttft, _total, cid, made, first_at, sent in samples:
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
        out["client"].append((sent - made) * 1000)
        out["admission"].append((enqueued - sent) * 1000)
        out["to worker"].append((times["meta"] - enqueued) * 1000)
        out["engine"].append((times["token"] - times["meta"]) * 1000)
        out["relay"].append((first_at - times["token"]) * 1000)
    return out


def _cpu_s(pids: list[int]) -> float:
    """User + system CPU seconds of ``pids`` together (a gone process counts 0)."""
    total = 0.0
    for pid in pids:
        try:
            total += proc_cpu_s(pid)
        except OSError:
            continue
    return total


def client_for(choice: str, concurrency: int) -> str:
    """Which client a level uses: ``choice`` (``openai`` or ``raw``), or for
    ``auto`` the official ``openai`` client at c=1 (like for like with what users
    run) and the raw client (:mod:`bench.sse_client`) above, where the official
    one's per-chunk parsing would load the load core."""
    if choice == "auto":
        return "openai" if concurrency <= 1 else "raw"
    return choice


def _senders(
    targets: dict[str, Target], concurrency: int, kind: str
) -> tuple[dict[str, Callable[[], Awaitable[Sample]]], list[Any]]:
    """Per target, a call that streams one completion with the ``kind`` client, and
    the clients to close after."""
    from bench.sse_client import RawClient

    senders: dict[str, Callable[[], Awaitable[Sample]]] = {}
    clients: list[Any] = []
    for name, t in targets.items():
        if kind == "raw":
            raw = RawClient(t.url, t.key, concurrency + 10)
            senders[name] = functools.partial(raw.stream, t.model)
            clients.append(raw)
            continue
        import httpx
        import openai

        client = openai.AsyncOpenAI(
            base_url=t.url,
            api_key=t.key,
            max_retries=0,
            http_client=httpx.AsyncClient(
                limits=httpx.Limits(max_connections=concurrency + 10),
                event_hooks={"request": [_wire_stamp]},
                timeout=httpx.Timeout(300),
            ),
        )
        senders[name] = functools.partial(one, client, t.model)
        clients.append(client)
    return senders, clients


async def run_levels(
    targets: dict[str, Target],
    concurrency: int,
    rounds: int,
    *,
    client: str = "openai",
    cores: tuple[int, int] | None = None,
    load_parts: dict[str, int] | None = None,
) -> dict[str, Level]:
    """Interleaved rounds of ``concurrency`` concurrent streams against each target.

    Each round runs every target once, in an order rotated from round to round, so a
    drift in machine load hits all targets alike. One client (and connection pool) per
    target, of the ``client`` kind (``openai`` or ``raw``), warmed up first. A
    target's CPU per request is its server processes' CPU time over its rounds (read
    from /proc before and after each) divided by the requests that succeeded; net of
    the server's idle rate (:func:`idle_cpu_rates`, measured after the warm-up) over
    that time. Over the same rounds, the busy share of the (web, load) ``cores`` and
    the CPU of the ``load_parts`` processes (name -> pid) are added up per target
    (:class:`bench.load_side.LoadUse`).
    """
    senders, clients = _senders(targets, concurrency, client)
    ttfts: dict[str, list[float]] = {name: [] for name in targets}
    samples: dict[str, list[Sample]] = {name: [] for name in targets}
    errors: dict[str, Counter[str]] = {name: Counter() for name in targets}
    busy_s = dict.fromkeys(targets, 0.0)
    cpu_s = dict.fromkeys(targets, 0.0)
    loads = {name: LoadUse(cores, dict(load_parts or {})) for name in targets}
    for send in senders.values():  # warm up
        await asyncio.gather(
            *(send() for _ in range(min(concurrency, 5))), return_exceptions=True
        )
    idle = await idle_cpu_rates(targets)
    names = list(targets)
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            cpu0 = _cpu_s(targets[name].pids)
            loads[name].start()
            started = time.perf_counter()
            results = await asyncio.gather(
                *(senders[name]() for _ in range(concurrency)),
                return_exceptions=True,
            )
            took = time.perf_counter() - started
            loads[name].stop(took)
            busy_s[name] += took
            cpu_s[name] += _cpu_s(targets[name].pids) - cpu0
            for result in results:
                if isinstance(result, BaseException):
                    kind = f"{type(result).__name__}: {str(result)[:100]}"
                    errors[name][kind] += 1
                else:
                    ttfts[name].append(result[0])
                    samples[name].append(result)
    for each in clients:
        await each.close()
    return {
        name: Level(
            ttfts=ttfts[name],
            rps=len(ttfts[name]) / busy_s[name],
            errors=errors[name],
            samples=samples[name],
            cpu_ms=(
                cpu_s[name] * 1000 / max(1, len(ttfts[name]))
                if targets[name].pids
                else None
            ),
            cpu_net_ms=(
                (cpu_s[name] - idle[name] * busy_s[name])
                * 1000
                / max(1, len(ttfts[name]))
                if targets[name].pids
                else None
            ),
            load=loads[name],
            client=client,
        )
        for name in targets
    }


def level_run(
    targets: dict[str, Target],
    concurrency: int,
    rounds: int,
    *,
    spy: Path | None = None,
    spy_pids: dict[str, int] | None = None,
    **levels: Any,
) -> dict[str, Level]:
    """:func:`run_levels` (``levels``: its keyword options) in a new event loop;
    with ``spy`` (a file prefix), each of ``spy_pids`` (name -> pid) is sampled by
    py-spy meanwhile (:mod:`bench.pyspy`: the GIL holder, into
    ``<spy>.<name>.c<concurrency>.txt``) and its summary printed, in samples per
    request of ``ours``."""
    if spy is None or not spy_pids:
        return asyncio.run(run_levels(targets, concurrency, rounds, **levels))
    from bench.pyspy import collapsed_summary, py_spy

    outs = {
        name: spy.with_name(f"{spy.name}.{name}.c{concurrency}.txt")
        for name in spy_pids
    }
    with contextlib.ExitStack() as stack:
        for name, pid in spy_pids.items():
            stack.enter_context(py_spy(pid, outs[name]))
        rows = asyncio.run(run_levels(targets, concurrency, rounds, **levels))
    per = len(rows["ours"].ttfts)
    for name, out in outs.items():
        print(f"py-spy {name} at c={concurrency}:")
        print(collapsed_summary(out, top=25, per=per))
    return rows


def litellm_start(
    tmp: Path, env: dict[str, str], *, port: int, upstream: str, model: str
) -> tuple[subprocess.Popen | None, str]:
    """Start LiteLLM proxy on ``port`` with ``model`` routed to ``upstream`` (its
    config written in ``tmp``); return the process (None where the LiteLLM venv
    ``.venv-litellm`` is missing) and its master key."""
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
        f"  - model_name: {model}\n"
        "    litellm_params:\n"
        f"      model: openai/{model}\n"
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


def ours_argv(server: str, port: int) -> list[str]:
    """Our web process's command line on 127.0.0.1:``port``: ``uvicorn`` as deployed
    (:func:`tests.stack.web_argv`, the Procfile's options) or ``daphne`` (the deployed
    listen backlog, :func:`bench.sse_web.server_argv`). Raises ValueError for another
    ``server``."""
    from bench.sse_web import server_argv
    from tests.stack import web_argv

    if server == "uvicorn":
        return web_argv(port)
    if server == "daphne":
        return server_argv(server, port)
    raise ValueError(f"unknown server {server!r}: uvicorn or daphne")


def overhead_parser() -> argparse.ArgumentParser:
    """The options of bench/gateway_overhead.py (see its docstring)."""
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
        "--output-moderation",
        choices=("off", "on"),
        default="off",
        help="output moderation of our API (off: like LiteLLM; on: the product's "
        "default, whose hold mode delays the first token by a window's verdict)",
    )
    parser.add_argument(
        "--profile",
        type=Path,
        default=None,
        help="a folder: run the web process and the worker under cProfile, write "
        "web.prof / worker.prof there (figures are then not comparable)",
    )
    parser.add_argument(
        "--py-spy",
        type=Path,
        default=None,
        help="a file prefix: sample processes (--py-spy-of) with py-spy during each "
        "level (PREFIX.<process>.c<level>.txt, collapsed stacks) and print where "
        "their CPU went",
    )
    parser.add_argument(
        "--py-spy-of",
        nargs="+",
        choices=SPIED,
        default=["web"],
        help="the processes --py-spy samples: our web process, or the load side's "
        "client (this process), upstream or inference worker",
    )
    parser.add_argument(
        "--worker-loop",
        choices=("asyncio", "uvloop"),
        default="asyncio",
        help="the inference worker's event loop: the standard library's (as the "
        "product runs it) or uvloop's (bench/uvloop_main.py: a lever measured)",
    )
    parser.add_argument(
        "--client",
        choices=("auto", "openai", "raw"),
        default="auto",
        help="the client every target gets: the official openai AsyncOpenAI, the "
        "light raw-socket one (bench/sse_client.py), or auto: openai at c=1, raw "
        "above (the official one's parsing would fill the load core at c=50)",
    )
    parser.add_argument(
        "--moderation-cost",
        type=int,
        default=0,
        help="after the levels, time this many input moderation checks of an API "
        "request, verdict cache hits and misses apart (bench/api_moderation_cost.py; "
        "0: none)",
    )
    parser.add_argument(
        "--server",
        choices=("uvicorn", "daphne"),
        default="uvicorn",
        help="our web server: uvicorn as deployed (the Procfile's options), or daphne",
    )
    parser.add_argument(
        "--pin",
        choices=("on", "off"),
        default="on",
        help="web process and LiteLLM on one core, everything else on another",
    )
    return parser
