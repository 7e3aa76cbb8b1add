"""How bench/gateway_overhead.py reports one concurrency level: its table lines, the
load side's use, the stage split of our TTFT, the ratios to LiteLLM (measured, and
per web core derived from the web CPU per request), and its recorded figures."""

from __future__ import annotations

import os
from typing import Any

from bench.load_side import load_bound, load_said
from bench.overhead_levels import GOALS, Level, stages
from bench.pinning import Pinning
from bench.record import figures_record, pct

# What each client is, as the figures say it.
CLIENTS = {
    "openai": "official openai AsyncOpenAI",
    "raw": "raw asyncio HTTP/1.1 client (bench/sse_client.py)",
}


def level_report(c: int, rows: dict[str, Level], rounds: int, pinning: Pinning) -> dict:
    """Print one concurrency level's table rows, record its headline figures and
    return them: ``admission`` p50 ms, ``ratio50``/``ratio99`` of the overheads,
    ``rps`` ratio, ``cpu`` (ms per request, all and net of idle) by target,
    ``per_core`` (requests/s per web core, 1 / web CPU per request, derived) of ours
    and LiteLLM, ``load`` (the load core's busy share, 0-1, by target; None
    unpinned), ``bound`` (why the level is load-bound, :func:`load_bound`; "" when
    not), ``parts`` (the load processes' own use, cores, by target), ``waits``
    (the harness parts' run-queue wait, share of the wall, by target), ``load_said``
    (:func:`load_said`) and ``client`` (which client sent the
    requests); NaN / absent when not measured."""
    base50 = pct(rows["direct"].ttfts, 50)
    base99 = pct(rows["direct"].ttfts, 99)
    overhead = {}
    params = (
        f"c={c}, {rounds} rounds, {pinning.describe()}, "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    out: dict[str, Any] = {
        "params": params,
        "cpu": {},
        "load": {},
        "parts": {},
        "waits": {},
    }
    client = next(iter(rows.values())).client
    for name, level in rows.items():
        p50, p99 = pct(level.ttfts, 50), pct(level.ttfts, 99)
        overhead[name] = (p50 - base50, p99 - base99)
        cpu = (
            ""
            if level.cpu_ms is None or level.cpu_net_ms is None
            else f"{level.cpu_ms:>8.2f} {level.cpu_net_ms:>8.2f}"
        )
        print(
            f"{c:>5} {name:>8} {p50:>9.1f} {p99:>9.1f} "
            f"{p50 - base50:>8.1f} {p99 - base99:>8.1f} {level.rps:>7.1f} "
            f"{sum(level.errors.values()):>6} {cpu}"
        )
        for kind, count in level.errors.most_common(3):
            print(f"{'':>15} {count} x {kind}")
        if level.load is not None:
            print(f"{'':>15} {level.load.describe(len(level.ttfts))}")
            out["load"][name] = level.load.share("load")
            out["parts"][name] = level.load.parts_share()
            out["waits"][name] = level.load.harness_wait()
        if name != "direct":
            figures = [
                (f"{name} TTFT overhead p50", p50 - base50, "ms", ""),
                (f"{name} errors", sum(level.errors.values()), "", "0"),
            ]
            if level.cpu_ms is not None:
                out["cpu"][name] = (level.cpu_ms, level.cpu_net_ms)
                figures.append(
                    (f"{name} server CPU per request", level.cpu_ms, "ms", "")
                )
                figures.append(
                    (
                        f"{name} server CPU per request, net of idle",
                        level.cpu_net_ms,
                        "ms",
                        "",
                    )
                )
            figures_record(bench="gateway_overhead", params=params, figures=figures)
    out["client"] = client
    out["bound"] = load_bound({name: level.load for name, level in rows.items()})
    out["load_said"] = load_said(out["load"], out["parts"], out["waits"])
    print(
        f"{c:>5}    client: {CLIENTS[client]}; "
        + (out["bound"] + ": not a verdict on the gateway" if out["bound"] else "")
    )
    split = stages(rows["ours"].samples)
    out["admission"] = pct(split["admission"], 50) if split["admission"] else None
    if split["admission"]:
        print(
            f"{c:>5}     ours TTFT by stage, p50 ms: "
            + ", ".join(f"{k} {pct(v, 50):.1f}" for k, v in split.items())
            + f" (the upstream's own TTFT, in engine: {base50:.1f} direct)"
        )
        figures_record(
            bench="gateway_overhead",
            params=params,
            figures=[
                (
                    "ours admission p50",
                    out["admission"],
                    "ms",
                    GOALS.get(f"admission c={c}", ""),
                )
            ],
        )
    if "litellm" in overhead:
        ours, theirs = overhead["ours"], overhead["litellm"]
        ratio50 = ours[0] / theirs[0] if theirs[0] > 0 else float("nan")
        ratio99 = ours[1] / theirs[1] if theirs[1] > 0 else float("nan")
        rps_ratio = rows["ours"].rps / rows["litellm"].rps
        out.update(ratio50=ratio50, ratio99=ratio99, rps=rps_ratio)
        print(
            f"{c:>5}    ours/litellm: overhead p50 {ratio50:.2f}, p99 {ratio99:.2f}; "
            f"requests/s {rps_ratio:.2f}x"
        )
        per_core = {
            name: 1000 / rows[name].cpu_ms
            for name in ("ours", "litellm")
            if rows[name].cpu_ms
        }
        if len(per_core) == 2:
            out["per_core"] = per_core
            print(
                f"{c:>5}    derived, requests/s per web core (1 / web CPU per "
                f"request): ours {per_core['ours']:.0f}, litellm "
                f"{per_core['litellm']:.0f}, "
                f"{per_core['ours'] / per_core['litellm']:.2f}x"
            )
        figures = [
            (
                "overhead ratio ours/litellm p50",
                ratio50,
                "",
                GOALS.get(f"ratio p50 c={c}", ""),
            ),
            (
                "overhead ratio ours/litellm p99",
                ratio99,
                "",
                GOALS.get(f"ratio p99 c={c}", ""),
            ),
            (
                "requests/s ratio ours/litellm",
                rps_ratio,
                "x",
                GOALS.get(f"rps c={c}", ""),
            ),
        ]
        figures_record(bench="gateway_overhead", params=params, figures=figures)
    return out
