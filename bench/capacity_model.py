"""The capacity model's arithmetic: unit costs fitted from measured runs, and the fleet
they imply at a given peak. Pure functions; ``bench/capacity.py`` measures the inputs.

Every cost is linear in what a run did: ``y = per_turn * turns + per_x * x`` where
``x`` is the tokens streamed (or, for the frames a client reads, also tokens); two
runs with different tokens per turn fix both coefficients (:func:`two_point_fit`).
The web's per-token cost is the relay's: reading each token from Redis, checking
output moderation's windows and sending the frames they make (frames per token are
set by the windows and the coalescing interval, not chosen by a run, so a separate
per-frame coefficient cannot be fitted apart from it; bench/capacity.py prints the
streaming CPU per frame beside it). Time-based costs (the
workers' heartbeats, the hub's blocking reads, a stream's keep-alive comments) are
measured as an idle rate and added per second of wall time.

The projection (:func:`fleet_project`) returns one :class:`Row` per figure, each with
the formula it was computed by, so the page that prints it (docs/capacity.md) shows how.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# The product's specified peak (issue 28): messages accepted per second, answers
# streaming at once, output tokens per second over all of them.
PEAK_MESSAGES_PER_S = 5_000.0
PEAK_STREAMS = 25_000.0
PEAK_TOKENS_PER_S = 2_500_000.0

# One web process per core, run to this share of the core at peak (the rest is
# headroom for bursts, GC pauses and a lost peer's load).
WEB_CORE_TARGET = 0.6
# Per Redis shard (one master, one core): redis-benchmark on commodity hardware does
# 100-180k simple commands/s per core without pipelining (redis.io/topics/benchmarks);
# streams' XADD/XREAD cost more than GET/SET, so the budget is the low end. Bytes: a
# shard's share of a 10 Gbit/s NIC, kept to 100 MB/s (0.8 Gbit/s) so replication and
# a failover's resync fit beside it (the same page: bandwidth is often the first limit).
REDIS_OPS_PER_SHARD = 100_000.0
REDIS_BYTES_PER_SHARD = 100e6
# Published vLLM output throughput per replica (tokens/s) and its GPUs. Source: Lambda
# Labs' vLLM benchmark (github.com/LambdaLabsML/vllm-benchmark, benchmark_v0.md),
# vLLM v0.6.0, num-scheduler-steps 10, rps=inf, 5,000 ShareGPT prompts, max-num-seq 256,
# H100-80GB-SXM: Llama 3.1 8B tp=1 8,088 tokens/s; Llama 3.1 70B tp=4 3,543 tokens/s.
PUBLISHED_GPU_MODELS: tuple[tuple[str, float, int], ...] = (
    ("Llama 3.1 8B on H100 (vLLM 0.6, tp=1)", 8_088.35, 1),
    ("Llama 3.1 70B on H100 (vLLM 0.6, tp=4)", 3_542.88, 4),
)


@dataclass(frozen=True)
class Fit:
    """``y = per_turn * turns + per_x * x`` (units of y per turn, per frame/token)."""

    per_turn: float
    per_x: float

    def predict(self, *, turns: float, x: float) -> float:
        """Return y for ``turns`` turns and ``x`` frames or tokens."""
        return self.per_turn * turns + self.per_x * x


def two_point_fit(a: tuple[float, float, float], b: tuple[float, float, float]) -> Fit:
    """Solve ``y = p * turns + q * x`` through two runs ``(turns, x, y)``.

    Raises ValueError when the runs do not tell the two costs apart (the same ratio
    of x to turns). A negative coefficient (noise on a small term) is clamped to 0
    and the other refitted through both runs' total (itself at least 0), so the fit
    stays physical.
    """
    (t1, x1, y1), (t2, x2, y2) = a, b
    det = t1 * x2 - t2 * x1
    if abs(det) < 1e-9 * max(1.0, abs(t1 * x2)):
        raise ValueError("the two runs have the same x per turn: cannot separate costs")
    p = (y1 * x2 - y2 * x1) / det
    q = (t1 * y2 - t2 * y1) / det
    if p < 0:
        return Fit(per_turn=0.0, per_x=max(0.0, (y1 + y2) / (x1 + x2)))
    if q < 0:
        return Fit(per_turn=max(0.0, (y1 + y2) / (t1 + t2)), per_x=0.0)
    return Fit(per_turn=p, per_x=q)


@dataclass(frozen=True)
class UnitCosts:
    """What one turn, frame or token costs, as measured (see bench/capacity.py).

    Web and worker CPU in core-seconds (web: per turn and per token relayed); Redis in commands (INFO commandstats calls) and
    bytes (net input + output); PostgreSQL per turn in statements
    (pg_stat_statements; None when it is not loaded), transactions and WAL bytes.
    ``*_idle_*``: the time-based rate of one web process and one worker with no load.
    ``frames``: SSE frames a client reads per turn (meta, done) and per token, at the
    measured token rate and coalescing.
    """

    web: Fit
    redis_ops: Fit
    redis_bytes: Fit
    worker: Fit
    pg_statements_per_turn: float | None
    pg_xacts_per_turn: float
    pg_wal_bytes_per_turn: float
    web_idle_cores: float
    redis_idle_ops_per_s: float
    redis_idle_bytes_per_s: float
    frames: Fit


@dataclass(frozen=True)
class Peak:
    """The load to project for: messages/s, concurrent streams, output tokens/s."""

    messages_per_s: float = PEAK_MESSAGES_PER_S
    streams: float = PEAK_STREAMS
    tokens_per_s: float = PEAK_TOKENS_PER_S


@dataclass(frozen=True)
class Budgets:
    """What one machine of each kind may carry (see the module's constants)."""

    web_core_target: float = WEB_CORE_TARGET
    redis_ops_per_shard: float = REDIS_OPS_PER_SHARD
    redis_bytes_per_shard: float = REDIS_BYTES_PER_SHARD
    coalesce_ms: float = 50.0
    frames_per_s_per_process: float = 8_000.0
    gpu_models: tuple[tuple[str, float, int], ...] = PUBLISHED_GPU_MODELS


@dataclass(frozen=True)
class Row:
    """One projected figure: what, its value and unit, and the formula it came from."""

    what: str
    value: float
    unit: str
    formula: str


def frames_per_s(peak: Peak, budgets: Budgets, frames: Fit) -> float:
    """SSE frames/s at ``peak``: ``frames.per_turn`` of each turn (meta, done) plus the
    token frames, ``frames.per_x`` a token as measured (output moderation's hold mode
    releases text a checked window at a time), and at most one per stream per
    coalescing interval."""
    per_stream = 1000.0 / budgets.coalesce_ms if budgets.coalesce_ms > 0 else math.inf
    return peak.messages_per_s * frames.per_turn + min(
        peak.tokens_per_s * frames.per_x, peak.streams * per_stream
    )


def fleet_project(units: UnitCosts, peak: Peak, budgets: Budgets) -> list[Row]:
    """Return the fleet for ``peak`` at ``budgets`` from measured ``units``.

    Rows: frames/s; web cores and processes (by CPU at the core target, and by the
    per-process frame cap, the larger); Redis ops/s, bytes/s and shards (by ops and by
    bytes, the larger); PostgreSQL statements/s (or transactions/s) and WAL MB/s;
    worker cores outside the engine; GPUs per published model (all tokens on it).
    """
    m, tok = peak.messages_per_s, peak.tokens_per_s
    fps = frames_per_s(peak, budgets, units.frames)
    rows = [
        Row(
            "SSE frames/s",
            fps,
            "frames/s",
            f"msg/s x frames/turn + min(tokens/s x frames/token, streams x "
            f"1000/coalesce_ms) = {m:,.0f} x {units.frames.per_turn:.2f} + "
            f"min({tok:,.0f} x {units.frames.per_x:.3f}, {peak.streams:,.0f} x "
            f"1000/{budgets.coalesce_ms:g})",
        )
    ]
    web_cores = units.web.predict(turns=m, x=tok)
    rows.append(
        Row(
            "web CPU",
            web_cores,
            "cores",
            f"msg/s x cpu/turn + tokens/s x cpu/token = {m:,.0f} x "
            f"{units.web.per_turn * 1e3:.3f} ms + {tok:,.0f} x "
            f"{units.web.per_x * 1e6:.2f} us",
        )
    )
    by_cpu = math.ceil(web_cores / budgets.web_core_target)
    by_frames = math.ceil(fps / budgets.frames_per_s_per_process)
    web_procs = max(by_cpu, by_frames)
    rows.append(
        Row(
            "web processes (1 core each)",
            web_procs,
            "processes",
            f"max(ceil(cores / {budgets.web_core_target:g}) = {by_cpu}, "
            f"ceil(frames/s / {budgets.frames_per_s_per_process:,.0f} per process) "
            f"= {by_frames})",
        )
    )
    ops = units.redis_ops.predict(turns=m, x=tok) + (
        web_procs * units.redis_idle_ops_per_s
    )
    nbytes = units.redis_bytes.predict(turns=m, x=tok) + (
        web_procs * units.redis_idle_bytes_per_s
    )
    rows.append(
        Row(
            "Redis commands/s",
            ops,
            "ops/s",
            f"msg/s x ops/turn + tokens/s x ops/token + web procs x idle ops/s = "
            f"{m:,.0f} x {units.redis_ops.per_turn:.1f} + {tok:,.0f} x "
            f"{units.redis_ops.per_x:.3f} + {web_procs} x "
            f"{units.redis_idle_ops_per_s:.1f}",
        )
    )
    rows.append(
        Row(
            "Redis bytes/s (in + out)",
            nbytes / 1e6,
            "MB/s",
            f"msg/s x bytes/turn + tokens/s x bytes/token + web procs x idle B/s = "
            f"{m:,.0f} x {units.redis_bytes.per_turn:,.0f} + {tok:,.0f} x "
            f"{units.redis_bytes.per_x:.1f} + {web_procs} x "
            f"{units.redis_idle_bytes_per_s:,.0f}",
        )
    )
    shards_ops = math.ceil(ops / budgets.redis_ops_per_shard)
    shards_bytes = math.ceil(nbytes / budgets.redis_bytes_per_shard)
    rows.append(
        Row(
            "Redis shards (masters)",
            max(shards_ops, shards_bytes),
            "shards",
            f"max(ceil(ops/s / {budgets.redis_ops_per_shard:,.0f}) = {shards_ops}, "
            f"ceil(B/s / {budgets.redis_bytes_per_shard / 1e6:,.0f} MB/s) = "
            f"{shards_bytes})",
        )
    )
    if units.pg_statements_per_turn is not None:
        rows.append(
            Row(
                "PostgreSQL statements/s",
                m * units.pg_statements_per_turn,
                "statements/s",
                f"msg/s x statements/turn = {m:,.0f} x "
                f"{units.pg_statements_per_turn:.1f}",
            )
        )
    rows.append(
        Row(
            "PostgreSQL transactions/s",
            m * units.pg_xacts_per_turn,
            "xacts/s",
            f"msg/s x transactions/turn = {m:,.0f} x {units.pg_xacts_per_turn:.1f}",
        )
    )
    rows.append(
        Row(
            "PostgreSQL WAL",
            m * units.pg_wal_bytes_per_turn / 1e6,
            "MB/s",
            f"msg/s x WAL bytes/turn = {m:,.0f} x {units.pg_wal_bytes_per_turn:,.0f} B",
        )
    )
    rows.append(
        Row(
            "worker CPU outside the engine",
            units.worker.predict(turns=m, x=tok),
            "cores",
            f"msg/s x cpu/turn + tokens/s x cpu/token = {m:,.0f} x "
            f"{units.worker.per_turn * 1e3:.3f} ms + {tok:,.0f} x "
            f"{units.worker.per_x * 1e6:.2f} us",
        )
    )
    for name, per_replica, gpus in budgets.gpu_models:
        replicas = math.ceil(tok / per_replica)
        rows.append(
            Row(
                f"GPUs, all tokens on {name}",
                replicas * gpus,
                "GPUs",
                f"ceil(tokens/s / {per_replica:,.0f} per replica) x {gpus} GPU = "
                f"{replicas} x {gpus}",
            )
        )
    return rows
