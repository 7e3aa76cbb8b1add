"""TTFT and tokens/s of the embedded model through the whole path.

    .venv/bin/python bench/turn_latency.py [--turns 12] [--max-tokens 128]

Starts `daphne` and `manage.py run_inference_worker --engine llamacpp` as processes on
the dev services (run `make migrate` first, or use `make bench`), signs in as a bench user
over HTTP, and for each turn: POST the message (CSRF) → read the SSE stream to `done`.
Prints per-turn figures and medians:

- client TTFT (ms): POST sent → first `token` frame received by the client.
- server TTFT (ms): enqueue → first token at the worker (stored on the message).
- decode tokens/s: completion tokens / (done frame − first token frame), client side.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chatsite.settings.dev")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bench.record import bench_record  # noqa: E402

PROMPTS = [
    "Name three colours.",
    "What is the capital of France?",
    "Give me a tip for writing clean Python code.",
    "Explain what a CPU does in two sentences.",
    "Write a haiku about the sea.",
    "What is 12 times 12?",
    "List three fruits that are red.",
    "Why is the sky blue?",
    "Suggest a name for a pet cat.",
    "What does HTTP stand for?",
    "Describe a rainbow.",
    "How many days are in a leap year?",
]


def main() -> None:
    import argparse

    import django
    import httpx

    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=12)
    parser.add_argument("--max-tokens", type=int, default=128)
    args = parser.parse_args()
    os.environ["CHAT_MAX_TOKENS"] = str(args.max_tokens)
    os.environ["INFERENCE_DEFAULT_POOL"] = (
        "bench"  # a pool only this run's worker serves
    )
    os.environ["LOG_LEVEL"] = "WARNING"

    django.setup()
    from django.contrib.auth import get_user_model

    from conversations.models import Message
    from tests.sse import parse_frames
    from tests.stack import running_stack

    User = get_user_model()
    user, _ = User.objects.get_or_create(username="bench")
    user.set_password("bench-pass-123")
    user.save()
    from gateway.models import ModelPool, Plan, Subscription

    pool, _ = ModelPool.objects.get_or_create(
        name="bench", defaults={"model": "SmolLM2-135M-Instruct.Q4_1"}
    )
    plan, _ = Plan.objects.get_or_create(name="bench")  # no token limits
    plan.allowed_pools.set([pool])
    Subscription.objects.update_or_create(user=user, defaults={"plan": plan})

    worker = ["--pool", "bench", "--engine", "llamacpp"]
    with running_stack(worker, for_tests=False) as base:
        rows = []
        with httpx.Client(base_url=base, timeout=120) as client:
            client.get("/login/")
            client.post(
                "/login/",
                data={
                    "username": "bench",
                    "password": "bench-pass-123",
                    "csrfmiddlewaretoken": client.cookies["csrftoken"],
                },
            )
            for i in range(args.turns):
                prompt = PROMPTS[i % len(PROMPTS)]
                sent = time.monotonic()
                r = client.post(
                    "/c/messages/",
                    data={"content": prompt},
                    headers={"X-CSRFToken": client.cookies["csrftoken"]},
                )
                r.raise_for_status()
                turn = r.json()
                first = done_at = None
                buffer = ""
                with client.stream(
                    "GET", turn["assistant_message"]["stream_url"]
                ) as stream:
                    for chunk in stream.iter_text():
                        buffer += chunk
                        events, _, buffer = parse_frames(buffer)
                        for e in events:
                            if e.event == "token" and first is None:
                                first = time.monotonic()
                            if e.event in ("done", "error"):
                                done_at = time.monotonic()
                        if done_at:
                            break
                m = Message.objects.get(id=turn["assistant_message"]["id"])
                decode_s = (done_at - first) if first and done_at else float("nan")
                rows.append(
                    {
                        "client_ttft_ms": (first - sent) * 1000
                        if first
                        else float("nan"),
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
        print()
        print(
            f"turns: {len(rows)}   model: SmolLM2-135M-Instruct Q4_1 (llama.cpp, CPU, {os.cpu_count()} cores)"
        )
        params = f"{len(rows)} turns, max {args.max_tokens} tokens, llama.cpp"
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
