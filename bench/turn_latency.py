"""TTFT and tokens/s of the embedded model through the whole path.

    .venv/bin/python bench/turn_latency.py [--turns 12] [--max-tokens 128]

Starts the web process (uvicorn, tests/stack.py) and `manage.py run_inference_worker --engine llamacpp` as processes on
the dev services (run `make migrate` first, or use `make bench`), signs in as a bench user
over HTTP, and for each turn: POST the message (CSRF) → read the SSE stream to `done`.
The web process runs on one core, the worker, this client, PostgreSQL and Redis on the other
(bench/cpu_pin.py); the web process's CPU per turn is read from /proc. Prints
per-turn figures and medians:

- client TTFT (ms): POST sent → first `token` frame received by the client.
- server TTFT (ms): enqueue → first token at the worker (stored on the message).
- decode tokens/s: completion tokens / (done frame − first token frame), client side.
"""

from __future__ import annotations

import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.boot import django_start, option_parser  # noqa: E402
from bench.corpus import LATENCY_PROMPTS  # noqa: E402
from bench.cpu_pin import load_note, load_pin, pinning_plan, web_cpu_ns, web_pin  # noqa: E402
from bench.record import bench_record  # noqa: E402

PASSWORD = "bench-pass-123"


def main() -> None:

    import httpx

    parser = option_parser(turns=12, max_tokens=128)
    args = parser.parse_args()
    django_start(
        {
            "CHAT_MAX_TOKENS": str(args.max_tokens),
            "INFERENCE_DEFAULT_POOL": "bench",  # a pool only this run's worker serves
            "LOG_LEVEL": "WARNING",
        }
    )
    from bench.chat import login, turn_read
    from bench.users import plan_user, pool_upsert
    from conversations.models import Message
    from tests.stack import running_processes

    pool = pool_upsert("bench", model="SmolLM2-135M-Instruct.Q4_1")
    plan_user("bench", plan="bench", pools=[pool], password=PASSWORD)

    worker = ["--pool", "bench", "--engine", "llamacpp"]
    plan = pinning_plan()
    load_pin(plan)  # the worker started next inherits the load cores
    with running_processes(worker, for_tests=False) as stack:
        base = stack.web.base
        web_pin(plan, stack.web.process.pid)
        load_pin(plan)  # PostgreSQL's backends forked since
        pinned = f"{plan.describe()}; {load_note()}"
        print(f"pinning: {pinned}")
        cpu_before = web_cpu_ns(stack.web.process.pid)
        rows = []
        with httpx.Client(base_url=base, timeout=120) as client:
            login(client, username="bench", password=PASSWORD)
            for i in range(args.turns):
                read = turn_read(client, LATENCY_PROMPTS[i % len(LATENCY_PROMPTS)])
                first, done_at = read.first_token, read.ended
                m = Message.objects.get(id=read.body["assistant_message"]["id"])
                decode_s = (done_at - first) if first and done_at else float("nan")
                rows.append(
                    {
                        "client_ttft_ms": read.ttft_ms,
                        "server_ttft_ms": m.ttft_ms,
                        "tokens": m.token_count,
                        "tok_s": (m.token_count - 1) / decode_s
                        if decode_s and m.token_count > 1
                        else float("nan"),
                        "status": m.status,
                    }
                )
                print(
                    f"turn {i + 1:2d}: client TTFT {rows[-1]['client_ttft_ms']:7.1f} ms  server TTFT "
                    f"{m.ttft_ms} ms  {m.token_count:4d} tokens  {rows[-1]['tok_s']:6.1f} tok/s  {m.status}"
                )
        web_cpu = (web_cpu_ns(stack.web.process.pid) - cpu_before) / 1e6
        print()
        print(
            f"turns: {len(rows)}   model: SmolLM2-135M-Instruct Q4_1 (llama.cpp, CPU, {os.cpu_count()} cores)"
        )
        print(f"web CPU per turn (/proc, whole turn): {web_cpu / len(rows):.1f} ms")
        params = (
            f"{len(rows)} turns, max {args.max_tokens} tokens, llama.cpp; "
            f"{plan.describe()}"
        )
        bench_record(
            bench="turn_latency",
            metric="web CPU per turn",
            value=web_cpu / len(rows),
            unit="ms",
            params=params,
        )
        for key, label, unit in [
            ("client_ttft_ms", "client TTFT ms", "ms"),
            ("server_ttft_ms", "server TTFT ms", "ms"),
            ("tok_s", "decode tokens/s", "tokens/s"),
            ("tokens", "completion tokens", "tokens"),
        ]:
            values = [r[key] for r in rows if r[key] == r[key]]
            print(
                f"median {label:18s} {statistics.median(values):8.1f}   (min {min(values):.1f}, max {max(values):.1f})"
            )
            if key != "tokens":
                bench_record(
                    bench="turn_latency",
                    metric=f"{label.removesuffix(' ms')} p50",
                    value=float(statistics.median(values)),
                    unit=unit,
                    params=params,
                )


if __name__ == "__main__":
    main()
