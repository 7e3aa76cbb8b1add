"""Follow-up turns while the previous turn's background jobs run: TTFT of turn 2..N.

    .venv/bin/python bench/followup_turns.py [--turns 8] [--think-s 1.0]
        [--max-tokens 64]

After each answer the chat queues its background generations on the same model pool
(the conversation's title, fact extraction, the rolling summary once the history is
long: CHAT_BACKGROUND_JOBS, MEMORY_SMALL_POOL). On a one-slot worker they compete
with the next turn; the background lane (inference/intake.py) puts the turn first and
stops a running background job for it. This bench measures what a person sees.

Starts the web process (uvicorn), one llama.cpp worker on a pool of its own (one slot, the embedded
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

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.boot import ROOT, django_start, option_parser  # noqa: E402
from bench.corpus import FOLLOWUP_PROMPTS  # noqa: E402
from bench.procs import spawn  # noqa: E402
from bench.record import bench_record  # noqa: E402

POOL = "bench-followup"
PASSWORD = "bench-pass-123"


def main() -> None:
    import httpx

    parser = option_parser(turns=8, think_s=1.0, max_tokens=64)
    parser.add_argument(
        "--no-background",
        action="store_true",
        help="no background jobs, no Celery: the floor the turns would have alone",
    )
    args = parser.parse_args()
    django_start(
        {
            "CHAT_MAX_TOKENS": str(args.max_tokens),
            "INFERENCE_DEFAULT_POOL": POOL,
            "MEMORY_SMALL_POOL": POOL,
            "LOG_LEVEL": "WARNING",
            "CHAT_BACKGROUND_JOBS": "0" if args.no_background else "1",
        }
    )
    from bench.chat import login, turn_read
    from bench.users import plan_user, pool_upsert
    from inference.connections import redis_sync
    from tests.stack import running_stack, stack_env

    pool = pool_upsert(POOL, model="SmolLM2-135M-Instruct.Q4_1")
    # a plan of its own, no token limits: with bench/turn_latency.py's "bench" plan the
    # router could pick that bench's pool, which no worker serves here (a 503)
    plan_user(POOL, plan="bench-followup", pools=[pool], password=PASSWORD)
    redis = redis_sync()
    started = f"{int(time.time() * 1000)}-0"  # a stream entry id: epoch ms first

    celery_argv = [ROOT / ".venv/bin/celery", "-A", "chatsite", "worker"]
    celery_argv += ["--pool", "solo", "--loglevel", "WARNING", "--purge"]
    env = stack_env(None, for_tests=False)
    celery = (
        None
        if args.no_background
        else spawn(celery_argv, cwd=ROOT, env=env, stderr=True)
    )
    rows = []
    try:
        worker = ["--pool", POOL, "--engine", "llamacpp"]
        embed = ["--engine", "sentence-transformers"]
        with running_stack(worker, for_tests=False, extra_workers=[embed]) as base:
            with httpx.Client(base_url=base, timeout=180) as client:
                login(client, username=POOL, password=PASSWORD)
                url = "/c/messages/"
                for i in range(args.turns):
                    read = turn_read(
                        client, FOLLOWUP_PROMPTS[i % len(FOLLOWUP_PROMPTS)], url=url
                    )
                    row = {
                        "ttft_ms": read.ttft_ms,
                        "queue_ms": (read.meta or {}).get("queue_ms"),
                        "status": read.end or "?",
                    }
                    url = f"/c/{read.body['conversation']['id']}/messages/"
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
    from inference import keys, protocol

    outcomes: dict[str, int] = {}
    for key in keys.scan_iter_all(redis, keys.GEN_KEY_PATTERN, count=1000):
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
