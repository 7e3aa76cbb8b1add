"""Follow-up turns while the previous turn's background jobs run: TTFT of turn 2..N.

    .venv/bin/python bench/followup_turns.py [--turns 8] [--think-s 1.0]
        [--max-tokens 64]

After each answer the chat queues its background generations on the same model pool
(the conversation's title, fact extraction, the rolling summary once the history is
long: CHAT_BACKGROUND_JOBS, MEMORY_SMALL_POOL). On a one-slot worker they compete
with the next turn; the background lane (inference/intake.py) puts the turn first and
stops a running background job for it. This bench measures what a person sees.

Starts daphne, one llama.cpp worker on a pool of its own (one slot, the embedded
model), an embedding worker and a Celery worker (``--pool solo``, the Procfile's) on
the dev services (``make migrate`` first), signs in as a bench user and, in one
conversation, sends ``--turns`` messages, each ``--think-s`` seconds after the
previous answer's ``done`` (a person reading; the background jobs start meanwhile).

Figures: client TTFT (POST sent -> first token frame) of the first turn and the p50
and max of the follow-ups; the worker's queue wait of each answer (its ``meta``
event's ``queue_ms``: time in the queue before a slot took it), and how many
background generations ran or were preempted (the worker's Prometheus counters are
not shared with this process, so they are counted from the background lane's streams:
each generation's stream ends with its terminal event).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chatsite.settings.dev")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bench.record import bench_record  # noqa: E402

PROMPTS = [
    "My name is Ada and I work as a gardener. What should I plant in spring?",
    "Which of those grows fastest?",
    "How often should I water it?",
    "I also keep bees. Is that plant good for them?",
    "What about shade?",
    "Anything else I should know?",
    "Thanks. Summarise what we said.",
    "What is my job?",
]

POOL = "bench-followup"


def _turn(client, url: str, content: str) -> dict:
    """POST one message and read its stream to the end; return the figures."""
    from tests.sse import parse_frames

    sent = time.monotonic()
    response = client.post(
        url,
        data={"content": content},
        headers={"X-CSRFToken": client.cookies["csrftoken"]},
    )
    if response.status_code != 201:
        raise SystemExit(f"POST {url}: {response.status_code} {response.text[:300]}")
    turn = response.json()
    first = None
    queue_ms = None
    buffer = ""
    status = "?"
    with client.stream("GET", turn["assistant_message"]["stream_url"]) as stream:
        for chunk in stream.iter_text():
            buffer += chunk
            events, _, buffer = parse_frames(buffer)
            for event in events:
                if event.event == "token" and first is None:
                    first = time.monotonic()
                elif event.event == "meta" and queue_ms is None:
                    queue_ms = event.data.get("queue_ms")
                elif event.event in ("done", "error"):
                    status = event.event
            if status != "?":
                break
    return {
        "conversation": turn["conversation"]["id"],
        "ttft_ms": (first - sent) * 1000 if first else float("nan"),
        "queue_ms": queue_ms,
        "status": status,
    }


def main() -> None:
    import django
    import httpx

    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=8)
    parser.add_argument("--think-s", type=float, default=1.0)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument(
        "--no-background",
        action="store_true",
        help="no background jobs, no Celery: the floor the turns would have alone",
    )
    args = parser.parse_args()
    os.environ.update(
        {
            "CHAT_MAX_TOKENS": str(args.max_tokens),
            "INFERENCE_DEFAULT_POOL": POOL,
            "MEMORY_SMALL_POOL": POOL,
            "LOG_LEVEL": "WARNING",
            "CHAT_BACKGROUND_JOBS": "0" if args.no_background else "1",
        }
    )
    django.setup()
    from django.contrib.auth import get_user_model

    from gateway.models import ModelPool, Plan, Subscription
    from inference.connections import redis_sync
    from tests.stack import running_stack, stack_env

    user, _ = get_user_model().objects.get_or_create(username="bench-followup")
    user.set_password("bench-pass-123")
    user.save()
    pool, _ = ModelPool.objects.get_or_create(
        name=POOL, defaults={"model": "SmolLM2-135M-Instruct.Q4_1"}
    )
    # a plan of its own, no token limits: with bench/turn_latency.py's "bench" plan the
    # router could pick that bench's pool, which no worker serves here (a 503)
    plan, _ = Plan.objects.get_or_create(name="bench-followup")
    plan.allowed_pools.set([pool])
    Subscription.objects.update_or_create(user=user, defaults={"plan": plan})
    redis = redis_sync()
    started = f"{int(time.time() * 1000)}-0"  # a stream entry id: epoch ms first

    celery = (
        None
        if args.no_background
        else subprocess.Popen(
            [
                str(ROOT / ".venv/bin/celery"),
                "-A",
                "chatsite",
                "worker",
                "--pool",
                "solo",
                "--loglevel",
                "WARNING",
                "--purge",
            ],
            cwd=ROOT,
            env=stack_env(None, for_tests=False),
            stdout=subprocess.DEVNULL,
        )
    )
    rows = []
    try:
        worker = ["--pool", POOL, "--engine", "llamacpp"]
        embed = ["--engine", "sentence-transformers"]
        with running_stack(worker, for_tests=False, extra_workers=[embed]) as base:
            with httpx.Client(base_url=base, timeout=180) as client:
                client.get("/login/")
                client.post(
                    "/login/",
                    data={
                        "username": "bench-followup",
                        "password": "bench-pass-123",
                        "csrfmiddlewaretoken": client.cookies["csrftoken"],
                    },
                )
                url = "/c/messages/"
                for i in range(args.turns):
                    row = _turn(client, url, PROMPTS[i % len(PROMPTS)])
                    url = f"/c/{row['conversation']}/messages/"
                    rows.append(row)
                    print(
                        f"turn {i + 1:2d}: client TTFT {row['ttft_ms']:7.1f} ms  "
                        f"queue {row['queue_ms']} ms  {row['status']}",
                        flush=True,
                    )
                    time.sleep(args.think_s)
            # jobs of the last turn may still run: count what ended meanwhile
            time.sleep(2)
    finally:
        # a solo Celery worker finishes its task before it exits: a task waiting on
        # the (now stopped) inference worker would hold it for minutes
        if celery is not None:
            celery.kill()
            celery.wait(timeout=30)
    outcomes = _outcomes(redis, started)
    follow = [r["ttft_ms"] for r in rows[1:] if r["ttft_ms"] == r["ttft_ms"]]
    waits = [r["queue_ms"] for r in rows[1:] if r["queue_ms"] is not None]
    params = (
        f"{len(rows)} turns, think {args.think_s:g} s, max {args.max_tokens} tokens, "
        f"llama.cpp 1 slot, background jobs {'off' if args.no_background else 'on'}"
    )
    print()
    print(f"first turn TTFT {rows[0]['ttft_ms']:.1f} ms")
    print(
        f"follow-up TTFT p50 {statistics.median(follow):.1f} ms, max {max(follow):.1f} ms"
    )
    print(
        f"follow-up queue wait p50 {statistics.median(waits):.0f} ms, max {max(waits)} ms"
    )
    print(f"generations of the model since the start, by outcome: {outcomes}")
    print(f"of which the turns: {len(rows)}; the rest are background jobs")
    for metric, value in [
        ("follow-up TTFT p50", statistics.median(follow)),
        ("follow-up TTFT max", max(follow)),
        ("follow-up queue wait p50", float(statistics.median(waits))),
        ("follow-up queue wait max", float(max(waits))),
    ]:
        bench_record(
            bench="followup_turns", metric=metric, value=value, unit="ms", params=params
        )


def _outcomes(redis, start: str) -> dict[str, int]:
    """How every generation begun after ``start`` (a stream
    entry id) ended: ``stop``/``length`` (done), ``preempted``, another error code.
    Handled queue entries are deleted, but each generation's stream remains (TTL)."""
    from inference import protocol

    outcomes: dict[str, int] = {}
    for key in redis.scan_iter(match="inf:gen:*", count=1000):
        head, tail = redis.xrange(key, count=1), redis.xrevrange(key, count=1)
        if not head or not tail or _id_key(head[0][0]) <= _id_key(start):
            continue
        meta = protocol.event_parse(*head[0])
        if meta.type != protocol.EVENT_META:
            continue  # an embedding job's stream is its one result event
        end = protocol.event_parse(*tail[0])
        label = end.data.get("code") or end.data.get("finish_reason") or end.type
        outcomes[label] = outcomes.get(label, 0) + 1
    return outcomes


def _id_key(entry_id: str) -> tuple[int, ...]:
    return tuple(int(part) for part in entry_id.split("-"))


if __name__ == "__main__":
    main()
