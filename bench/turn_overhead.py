"""What our path adds to a chat turn: POST of a message to the first token at the client,
minus the engine's own time to first token.

    .venv/bin/python bench/turn_overhead.py [--turns 20] [--users 100] [--rounds 1]
        [--think-s 10] [--active-s 30] [--cold-starts 1] [--cases plain memory]
        [--two-requests] [--profile 20] [--hot-path [--moderation-turns 20]]

The defaults are the quick run of ``make bench`` (a few minutes on a busy 2-core
machine); a big run: ``--turns 200 --rounds 5 --cold-starts 5``.

Runs on the dev services (`make migrate` first), like bench/flood.py: the web process (uvicorn) and the
workers as processes (tests/stack.py), bench-only users and a bench-only pool. The
chat worker is the scripted engine with no delay (``--delay-ms 0``), so its own time to
first token is about 0; it is still measured and subtracted per turn: the ``meta``
event is written when the worker picks the job up and the first ``token`` event when
the engine yields it, and a Redis stream entry id is the XADD's millisecond clock, so
engine TTFT = token entry ms - meta entry ms (1 ms resolution).

A turn, as the chat page does it: POST ``/c/messages/`` (session cookie, CSRF header,
``Accept: text/event-stream``) -> 201 whose body is the answer's stream -> the first
``token`` frame (``--two-requests``: the 201 carries JSON with the stream URL, then a
GET of the stream, as the page did before). The
client is a light raw-socket one (asyncio streams), not httpx, so that on a 2-core
machine it takes little of the CPU it measures. Figures, per case:

- overhead ms = client (first token frame - POST sent) - engine TTFT; p50/p99 at 1
  user (``--turns`` turns one after another), at ``--users`` users at once (a burst:
  ``--rounds`` rounds of one turn each, every POST in the same instant) and at
  ``--users`` users as people (each reads the answer ``--think-s`` x 0.5-1.5 s before
  the next turn, for ``--active-s`` s), with the POST's own share (sent -> the
  201's head);
- cold start: the first turn of a freshly started web process (signed in over HTTP first,
  as a new user would be), ``--cold-starts`` + 1 times (the last start then runs the
  warm turns), vs the warm p50 (goal: within 2x).

Cases: ``plain``: users without facts or documents, input moderation off (goal p50 <
10 ms, p99 < 50 ms); ``memory``: users with 5 facts and a document (retrieval) and input
moderation on, with an embedding worker (all-MiniLM-L6-v2, sentence-transformers) (goal
p50 < 40 ms). ``--profile N`` instead runs N turns in this process through
``chatsite.asgi.application`` (scripted worker as a process) under cProfile and prints
the time of each stage of the POST (session and user, admission, quota reservation,
context and token counting, storing, enqueue) and of the relay up to its first frame,
the database queries and Redis commands per turn, and the top functions.

Pinning (bench/cpu_pin.py): the web process on one core, everything else (this client, the
workers, PostgreSQL, Redis) on the others; each figure says so, with the machine's load,
and the web process's own CPU per turn is read from /proc beside the wall-clock figures.
``--hot-path``: only the goal table's plain-turn rows (:func:`hot_path_rows`, in
bench/turn_hot_path.py, which the lead's table calls).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import chatsite.blas_threads  # noqa: E402, F401  as the web process: before numpy
from bench.boot import django_start, option_parser  # noqa: E402
from bench.cpu_pin import load_note, load_pin, pinning_plan, web_cpu_ns, web_pin  # noqa: E402
from bench.record import bench_record, pct  # noqa: E402
from bench.sse_wire import Session, turn_streamed, turn_two_requests  # noqa: E402
from bench.turn_hot_path import hot_path_rows  # noqa: E402  the goal table's rows

POOL = "turn-bench"  # a pool only this run's worker serves
PASSWORD = "turn-bench-pass-123"
CHAT_WORKER = ["--pool", POOL, "--engine", "scripted", "--delay-ms", "0"]
CHAT_WORKER += ["--script-text", "Fine, thanks.", "--concurrency", "128"]
EMBED_WORKER = ["--engine", "sentence-transformers"]
QUESTION = "How often should I water the tomatoes in my greenhouse?"
GOALS = {
    ("plain", "p50"): "< 10 ms",
    ("plain", "p99"): "< 50 ms",
    ("memory", "p50"): "< 40 ms",
}


TWO_REQUESTS = False  # --two-requests


async def turn(
    base: str, s: Session, on_token: Callable[[], None] | None = None
) -> dict[str, float]:
    """One chat turn in a new conversation, read to the answer's end; figures in ms
    (``post``: to the POST's response head). ``on_token``: called as the first token
    frame is read."""
    from urllib.parse import quote

    parts = urlsplit(base)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    run = turn_two_requests if TWO_REQUESTS else turn_streamed
    t = await run(host, port, s, f"content={quote(QUESTION)}", on_token)
    return {
        "overhead": (t["first_at"] - t["sent"]) * 1000 - t["engine"],
        "post": (t["posted"] - t["sent"]) * 1000,
        "engine": t["engine"],
    }


# --- set-up ----------------------------------------------------------------------------


def users_setup(count: int, *, memory: bool) -> list[Any]:
    """``count`` bench users on an unlimited plan for :data:`POOL` (made once, kept);
    with ``memory`` each has 5 facts and a ready document (the first user's are
    embedded by the embedding worker, the others' rows copied from them)."""
    from bench.users import plan_user, pool_upsert
    from gateway.models import ModelPool

    # a burst of --users turns must not be shed: the web tier is measured, not
    # admission control (the worker shares the load core with everything else)
    pool = pool_upsert(
        POOL,
        model="scripted-1",
        engine=ModelPool.Engine.SCRIPTED,
        queue_threshold=10_000,
    )
    kind = "memory" if memory else "plain"
    users = []
    for i in range(count):
        name = f"turnbench-{kind}-{i}"
        users.append(
            plan_user(name, plan="turn-bench", pools=[pool], password=PASSWORD)
        )
    if memory:
        memory_setup(users)
    return users


def memory_setup(users: list[Any]) -> None:
    """Give ``users[0]`` the bench memory (:func:`bench.users.memory_add`) and
    copy its facts and document rows, vectors included, to the others that have
    none."""
    from bench.users import memory_add
    from memory.models import Chunk, Document, MemoryFact

    first = users[0]
    doc = memory_add(first)
    facts = list(MemoryFact.objects.filter(user=first))
    chunks = list(Chunk.objects.filter(document=doc))
    for user in users[1:]:
        if Document.objects.filter(user=user, status="ready").exists():
            continue
        copy = Document.objects.get(pk=doc.pk)
        copy.pk, copy.user = None, user
        copy.save()
        rows = []
        for c in chunks:
            c = Chunk.objects.get(pk=c.pk)
            c.pk, c.document, c.user = None, copy, user
            rows.append(c)
        Chunk.objects.bulk_create(rows)
        MemoryFact.objects.bulk_create(
            [MemoryFact(user=user, text=f.text, embedding=f.embedding) for f in facts]
        )


def session_for(user: Any) -> Session:
    """A signed-in session for ``user`` without the password hash (as force_login)."""
    from django.conf import settings
    from django.test import Client
    from django.utils.crypto import get_random_string

    client = Client()
    client.force_login(user)
    cookies = {
        settings.SESSION_COOKIE_NAME: client.cookies[settings.SESSION_COOKIE_NAME].value
    }
    cookies[settings.CSRF_COOKIE_NAME] = get_random_string(32)
    return Session(cookies)


def login_http(base: str, username: str) -> Session:
    """Sign in over HTTP, as a person would (GET and POST the login form)."""
    import httpx

    from bench.chat import login

    with httpx.Client(base_url=base, timeout=60) as http:
        login(http, username=username, password=PASSWORD)
        return Session({k: v for k, v in http.cookies.items()})


# --- runs -----------------------------------------------------------------------------


def _summary(label: str, rows: list[dict[str, float]]) -> dict[str, float]:
    over = [r["overhead"] for r in rows]
    post = [r["post"] for r in rows]
    engine = [r["engine"] for r in rows]
    p50, p99 = pct(over, 50), pct(over, 99)
    print(
        f"  {label:28s} n={len(rows):4d}  overhead p50 {p50:6.1f} ms  p99 {p99:6.1f} ms"
        f"   (POST->201 p50 {pct(post, 50):6.1f} ms; engine TTFT p50 "
        f"{pct(engine, 50):.0f} ms)"
    )
    return {"p50": p50, "p99": p99}


async def _concurrent(
    base: str, sessions: list[Session], rounds: int, on_token: Any = None
) -> list[dict]:
    rows: list[dict] = []
    for _ in range(rounds):
        rows += await asyncio.gather(*(turn(base, s, on_token) for s in sessions))
    return rows


async def _thinking(
    base: str, sessions: list[Session], *, think_s: float, active_s: float
) -> list[dict]:
    """Each session is a person: read the answer for a random ``think_s`` x 0.5-1.5
    seconds, send the next turn, for ``active_s`` seconds (the first turns spread over
    one think time), as load tools model concurrent users (locust's ``wait_time``).
    With 100 users and 10 s that is about 10 turns a second."""
    import random

    rows: list[dict] = []
    loop = asyncio.get_running_loop()
    end = loop.time() + active_s

    async def person(s: Session) -> None:
        await asyncio.sleep(random.uniform(0, think_s))
        while loop.time() < end:
            rows.append(await turn(base, s))
            await asyncio.sleep(random.uniform(0.5 * think_s, 1.5 * think_s))

    await asyncio.gather(*(person(s) for s in sessions))
    return rows


def run_case(case: str, args: argparse.Namespace) -> None:
    from tests.stack import stack_env, web_process, worker_processes

    memory = case == "memory"
    env = stack_env(
        {
            "SAFETY_INPUT_ENABLED": "1" if memory else "0",
            "CHAT_MESSAGE_RATE": "100000/m",
            "LOGIN_RATE": "100000/m",
            "CHAT_BACKGROUND_JOBS": "0",  # titles, summaries, facts: not measured
            "INFERENCE_DEFAULT_POOL": POOL,
            "LOG_LEVEL": "WARNING",
        },
        for_tests=False,
    )
    what = (
        "users with 5 facts + 1 document, input moderation on"
        if memory
        else "users without facts or documents, input moderation off"
    )
    print(f"\ncase {case}: {what}")
    workers = [CHAT_WORKER] + ([EMBED_WORKER] if memory else [])
    plan = pinning_plan()
    load_pin(plan)  # the workers started next inherit the load cores
    print(f"  pinning: {plan.describe()}; {load_note()}")
    with worker_processes(workers, env):
        users = users_setup(max(args.users, 1), memory=memory)
        cold: list[float] = []
        for start in range(args.cold_starts + 1):
            with web_process(env) as web:
                web_pin(plan, web.process.pid)
                load_pin(plan)  # PostgreSQL's backends forked since
                s = login_http(web.base, users[0].username)
                first = asyncio.run(turn(web.base, s))
                cold.append(first["overhead"])
                print(
                    f"  web process start {start + 1}: first turn overhead {first['overhead']:7.1f} ms"
                )
                if start < args.cold_starts:
                    continue
                cpu_before = web_cpu_ns(web.process.pid)
                seq = [asyncio.run(turn(web.base, s)) for _ in range(args.turns)]
                cpu_turn = (web_cpu_ns(web.process.pid) - cpu_before) / 1e6 / len(seq)
                one = _summary("1 user, turns in a row", seq)
                print(f"  web CPU per turn (/proc, whole turn) {cpu_turn:.2f} ms")
                sessions = [session_for(u) for u in users[: args.users]]
                conc = asyncio.run(_concurrent(web.base, sessions, args.rounds))
                many = _summary(f"{args.users} users at once (burst)", conc)
                rows = asyncio.run(
                    _thinking(
                        web.base, sessions, think_s=args.think_s, active_s=args.active_s
                    )
                )
                thinking = _summary(
                    f"{args.users} users, think {args.think_s:g} s", rows
                )
    cold_p50 = statistics.median(cold)
    ratio = cold_p50 / one["p50"] if one["p50"] else float("nan")
    print(
        f"  cold start (first turn of a fresh web process, n={len(cold)}): p50 "
        f"{cold_p50:.1f} ms, max {max(cold):.1f} ms; cold/warm p50 {ratio:.2f}x "
        "(goal <= 2x)"
    )
    pinned = plan.describe()
    for params, figures in (
        ("c=1", one),
        (f"c={args.users} at once", many),
        (f"c={args.users}, think {args.think_s:g} s", thinking),
    ):
        for q in ("p50", "p99"):
            bench_record(
                bench="turn_overhead",
                metric=f"{case} overhead {q}",
                value=figures[q],
                unit="ms",
                params=f"{params}; {pinned}",
                goal=GOALS.get((case, q), ""),
            )
    bench_record(
        bench="turn_overhead",
        metric=f"{case} web CPU per turn",
        value=cpu_turn,
        unit="ms",
        params=f"c=1, {args.turns} turns, /proc; {pinned}",
    )
    bench_record(
        bench="turn_overhead",
        metric=f"{case} cold/warm p50",
        value=ratio,
        unit="x",
        params=f"cold starts={len(cold)}",
        goal="<= 2x",
    )


def main() -> None:
    parser = option_parser(turns=20, users=100, rounds=1, cold_starts=1)
    parser.add_argument(
        "--think-s",
        type=float,
        default=10.0,
        help="the --users as people: seconds between an answer and the next turn",
    )
    parser.add_argument(
        "--active-s",
        type=float,
        default=30.0,
        help="how long the thinking users keep sending turns (s)",
    )
    parser.add_argument("--cases", nargs="+", default=["plain", "memory"])
    parser.add_argument(
        "--two-requests",
        action="store_true",
        help="POST for the turn's JSON, then GET the stream (the old chat page)",
    )
    parser.add_argument(
        "--hot-path",
        action="store_true",
        help="only the goal table's plain-turn rows, pinned (bench/turn_hot_path.py)",
    )
    parser.add_argument(
        "--moderation-turns",
        type=int,
        default=20,
        help="--hot-path: turns timing input moderation, per verdict cache hit/miss",
    )
    parser.add_argument(
        "--py-spy",
        metavar="FILE",
        help="--hot-path: sample the web process with py-spy over the c=1 turns (raw output)",
    )
    parser.add_argument("--profile", type=int, default=0, metavar="TURNS")
    parser.add_argument("--profile-case", default="plain", choices=["plain", "memory"])
    # the streamed POST's CPU and profile in process (bench/turn_stream_profile.py)
    parser.add_argument("--stream-profile", type=int, default=0, metavar="TURNS")
    args = parser.parse_args()
    global TWO_REQUESTS
    TWO_REQUESTS = args.two_requests
    django_start({"INFERENCE_DEFAULT_POOL": POOL, "LOG_LEVEL": "WARNING"})
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()}")
    if args.hot_path:
        hot_path_rows(args)
        return
    if args.stream_profile:
        from bench.turn_stream_profile import stream_profile_run

        stream_profile_run(args.stream_profile)
        return
    if args.profile:
        from bench.turn_profile import profile_run

        profile_run(args.profile, memory=args.profile_case == "memory")
        return
    for case in args.cases:
        run_case(case, args)
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
