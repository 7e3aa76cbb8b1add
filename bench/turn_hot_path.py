"""The web tier's hot path for a plain chat turn, measured per core: the rows of the
goal table (:func:`hot_path_rows`), run by ``bench/turn_overhead.py --hot-path``.

Pinning (:mod:`bench.cpu_pin`): the web process (uvicorn) on the first core this
process may use; the client, the workers, PostgreSQL and Redis on the others.

The window: "POST to first frame" is the web process's CPU from the POST sent to the
first token frame read, sampled as the client reads that frame (it reads on to the
answer's end, outside the window): the request, the stream's start and the first
token's relay. The scripted worker (``--rest-delay-ms``) sends the first token at
once, the rest REST_S (1 s) later one turn at a time, BURST_REST_S (20 s) later in the
burst; the rest and the settlement are in "to the answer settled".

Rows (each a dict: measure, value, unit, pinning, params, goal):

- web CPU per plain turn, POST to first token frame: the web process's own CPU
  (:func:`bench.cpu_pin.web_cpu_ns`, its process CPU clock: nanoseconds, every
  thread, the ended ones included), ``--turns`` turns one after another (each a new
  conversation, moderation off), the mean (the sum of the windows / turns) with the
  median and the spread beside it; beside it the wall-clock overhead p50 (POST to first token minus the
  engine's TTFT) and the CPU to the answer settled. ``--py-spy FILE``: py-spy of
  those turns, summarised (:mod:`bench.pyspy`);
- the same POST answered with the turn's JSON (no stream): the POST's CPU alone;
- ``--users`` users at once on one process (:func:`bench.turn_overhead._concurrent`):
  turn overhead p50 and p99 (POST to first token frame minus the engine's TTFT), and
  the CPU per turn from the first POST sent to the last first frame read;
- input moderation's own cost on a turn, p50, timed on the web core as admission calls
  it (:func:`safety.services.input_moderate`, the turn's vector already embedded): a
  verdict cache hit (judged in the last SAFETY_VERDICT_CACHE_S s) and a miss (a new
  text). ``bench/api_moderation_cost.py`` has the API's and the embedding's share.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import os
import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.cpu_pin import (
    Pinning,
    load_note,
    load_pin,
    pinning_plan,
    web_cpu_ns,
    web_pin,
)
from bench.record import bench_record, pct

RUN_STARTED = dt.datetime.now(dt.UTC)  # an aware now, as Django's

GOALS = {
    "web CPU per plain turn (POST to first frame)": "<= 6 ms",
    "100 users at once, turn overhead p50": "<= 0.6 s",
    "input moderation per turn p50, verdict cache hit": "<= 3 ms",
    "input moderation per turn p50, verdict cache miss": "<= 15 ms",
}


def _row(
    measure: str, value: float, unit: str, pinning: str, params: str, goal: str = ""
) -> dict[str, Any]:
    return {
        "measure": measure,
        "value": round(value, 3),
        "unit": unit,
        "pinning": pinning,
        "params": params,
        "goal": goal or GOALS.get(measure, ""),
    }


async def _turn_with_cpu(base: str, s: Any, pid: int) -> dict[str, float]:
    """One turn (:func:`bench.turn_overhead.turn`) with the web process's CPU (ms) from the
    POST sent to the first token frame read (sampled there; the turn is read on to
    the answer's end, outside the window)."""
    from bench.turn_overhead import turn

    at_token: list[int] = []
    before = web_cpu_ns(pid)
    row = await turn(base, s, lambda: at_token.append(web_cpu_ns(pid)))
    row["cpu_ms"] = (at_token[0] - before) / 1e6
    return row


QUIET_NS = 2_000_000  # an idle web process's CPU in 250 ms is well under this
REST_S = 1.0  # c=1: an answer's rest and end this long after its first token
BURST_REST_S = 20.0  # the burst: longer than the last user's wait for a first frame


def _worker(rest_s: float) -> list[str]:
    """The scripted worker's arguments: the first token at once, the rest later."""
    from bench.turn_overhead import CHAT_WORKER

    return [*CHAT_WORKER, "--rest-delay-ms", str(int(rest_s * 1000))]


def _json_post_cpu(base: str, s: Any, pid: int) -> float:
    """The web process's CPU (ms) for one message POST answered with the turn's JSON (the
    page's old way: no stream opened), then wait until the web process is quiet."""
    from urllib.parse import quote, urlsplit

    from bench.sse_wire import json_post
    from bench.turn_overhead import QUESTION

    parts = urlsplit(base)
    before = web_cpu_ns(pid)
    status, body = asyncio.run(
        json_post(
            parts.hostname or "127.0.0.1",
            parts.port or 80,
            "/c/messages/",
            s,
            f"content={quote(QUESTION)}",
        )
    )
    spent = (web_cpu_ns(pid) - before) / 1e6
    if status != 201:
        raise RuntimeError(f"POST: {status} {body}")
    time.sleep(REST_S)  # the answer's end, outside the next POST's window
    _settled(pid, [])  # nobody follows the answer: wait for quiet only
    return spent


def _settled(pid: int, users: list[Any], *, limit_s: float = 10.0) -> None:
    """Wait until no answer of ``users`` is streaming (every turn relayed to its end
    and finalised), then until the web process has used less than QUIET_NS of CPU
    in 250 ms (the quota settled; on a loaded core the process may wait that long for
    its turn; an idle server still wakes every 100 ms); at most ``limit_s``."""
    from conversations.models import Message

    deadline = time.monotonic() + limit_s
    streaming = Message.objects.filter(
        conversation__user__in=users,
        status=Message.Status.STREAMING,
        created_at__gte=RUN_STARTED,  # an earlier run's unfollowed answers stay so
    )
    while streaming.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    last = web_cpu_ns(pid)
    while time.monotonic() < deadline:
        time.sleep(0.25)
        now = web_cpu_ns(pid)
        if now - last < QUIET_NS:
            return
        last = now


@contextmanager
def _sampled(pid: int, args: argparse.Namespace) -> Iterator[None]:
    """py-spy of the web process over the block when ``args.py_spy`` names a file."""
    if not getattr(args, "py_spy", None):
        yield
        return
    from bench.pyspy import collapsed_summary, py_spy

    out = Path(args.py_spy)
    with py_spy(pid, out):
        yield
    print(f"py-spy of the web process over {args.turns} turns ({out}):")
    print(collapsed_summary(out, per=args.turns))


def web_rows(args: argparse.Namespace, plan: Pinning) -> list[dict[str, Any]]:
    """The plain turn's rows: CPU per turn and overhead at c=1, then ``args.users``
    at once (see the module docstring)."""
    from bench.turn_overhead import (
        _concurrent,
        login_http,
        session_for,
        users_setup,
    )
    from tests.stack import stack_env, web_process, worker_processes

    env = stack_env(
        {
            "SAFETY_INPUT_ENABLED": "0",
            # plain: no output moderation either (no embedding worker here)
            "SAFETY_OUTPUT_ENABLED": "0",
            "CHAT_MESSAGE_RATE": "100000/m",
            "LOGIN_RATE": "100000/m",
            "CHAT_BACKGROUND_JOBS": "0",
            "LOG_LEVEL": "WARNING",
        },
        for_tests=False,
    )
    pinning = plan.describe()
    rows: list[dict[str, Any]] = []
    load_pin(plan)  # this process first: the workers it starts inherit the cores
    users = users_setup(max(args.users, 1), memory=False)
    with web_process(env) as web:
        pid = web.process.pid
        web_pin(plan, pid)
        s = login_http(web.base, users[0].username)
        with worker_processes([_worker(REST_S)], env) as workers:
            load_pin(plan, [w.pid for w in workers])
            for _ in range(3):  # warm: connections, caches, the tokenizer
                asyncio.run(_turn_with_cpu(web.base, s, pid))
                _settled(pid, users[:1])
            load_pin(plan)  # PostgreSQL's backends opened meanwhile
            web_pin(plan, pid)
            seq: list[dict[str, float]] = []
            with _sampled(pid, args):
                started = web_cpu_ns(pid)
                for _ in range(args.turns):
                    seq.append(asyncio.run(_turn_with_cpu(web.base, s, pid)))
                    _settled(pid, users[:1])
                whole_ms = (web_cpu_ns(pid) - started) / 1e6 / max(len(seq), 1)
            posts = [_json_post_cpu(web.base, s, pid) for _ in seq]
        # answers end BURST_REST_S after their first token: no settlement in a window
        with worker_processes([_worker(BURST_REST_S)], env) as workers:
            load_pin(plan, [w.pid for w in workers])
            sessions = [session_for(u) for u in users[: args.users]]
            at: list[int] = []
            before, mark = web_cpu_ns(pid), lambda: at.append(web_cpu_ns(pid))
            burst = asyncio.run(_concurrent(web.base, sessions, args.rounds, mark))
            # to the last first token frame read, not the answers' ends
            burst_cpu = (max(at) - before) / 1e6 / max(len(burst), 1)
            _settled(pid, users[: args.users], limit_s=BURST_REST_S + 20)
    cpu = [r["cpu_ms"] for r in seq]
    over = [r["overhead"] for r in seq]
    params = f"{len(seq)} turns in a row, new conversations, moderation off"
    rows.append(
        _row(
            "web CPU per plain turn (POST to first frame)",
            statistics.mean(cpu),
            "ms",
            pinning,
            params + f" (process CPU clock, ns: sum / turns; median "
            f"{statistics.median(cpu):.2f}, p10-p90 {pct(cpu, 10):.2f}-"
            f"{pct(cpu, 90):.2f} ms)",
        )
    )
    rows.append(
        _row(
            "web CPU per plain turn, to the answer settled",
            whole_ms,
            "ms",
            pinning,
            params + " (process CPU / turns)",
        )
    )
    rows.append(
        _row(
            "plain turn overhead p50, c=1 (wall)",
            statistics.median(over),
            "ms",
            pinning,
            params + f" (p99 {pct(over, 99):.1f} ms)",
        )
    )
    rows.append(
        _row(
            "web CPU per plain turn, POST answered with JSON (no stream)",
            statistics.mean(posts),
            "ms",
            pinning,
            f"{len(posts)} POSTs in a row, each answer left to the worker (process "
            f"CPU clock: sum / POSTs; median {statistics.median(posts):.2f} ms): the "
            "POST's share; the rest of the first row is the "
            "stream's start",
        )
    )
    b_over = [r["overhead"] for r in burst]
    params = f"{args.users} users, {args.rounds} round(s), every POST at once"
    rows.append(
        _row(
            f"{args.users} users at once, turn overhead p50",
            pct(b_over, 50) / 1000,
            "s",
            pinning,
            params + f" (p99 {pct(b_over, 99) / 1000:.2f} s)",
            goal=GOALS["100 users at once, turn overhead p50"]
            if args.users == 100
            else "",
        )
    )
    rows.append(
        _row(
            f"{args.users} users at once, web CPU per turn",
            burst_cpu,
            "ms",
            pinning,
            params + " (POST sent to the last first frame read / turns)",
        )
    )
    return rows


def _questions() -> list[str]:
    """Everyday questions, none with an id-like token."""
    plants = ["tomatoes", "cucumbers", "peppers", "basil", "lettuce", "beans"]
    return [f"How often should I water the {p} in my garden?" for p in plants]


def _verdict_forget(text: str) -> None:
    """Drop the cached verdict of ``text`` (:mod:`safety.verdicts`): a miss next."""
    from inference.connections import redis_sync
    from safety.classifiers import classifier_get
    from safety.verdicts import verdict_key

    redis_sync().delete(verdict_key(backend=classifier_get().name, text=text))


def moderation_rows(args: argparse.Namespace, plan: Pinning) -> list[dict[str, Any]]:
    """Input moderation's own cost on a turn, hit and miss (see the module
    docstring); needs the embedding worker (started here)."""
    from django.conf import settings
    from django.contrib.auth import get_user_model

    from bench.turn_overhead import EMBED_WORKER, QUESTION
    from inference.embeddings import TextVector
    from safety import services as safety_services
    from safety.models import ModerationEvent
    from tests.stack import stack_env, worker_processes

    settings.SAFETY_INPUT_ENABLED = True
    user, _ = get_user_model().objects.get_or_create(username="turnbench-moderation")
    env = stack_env({"LOG_LEVEL": "WARNING"}, for_tests=False)
    load_pin(plan)
    timings: dict[str, list[tuple[float, float]]] = {"hit": [], "miss": []}
    with worker_processes([EMBED_WORKER], env) as workers:
        load_pin(plan, [w.pid for w in workers])
        if plan.web:  # timed where the web process runs, beside nothing else
            os.sched_setaffinity(0, plan.web)
        for i in range(args.moderation_turns + 1):
            for kind in ("miss", "hit"):
                # a miss: an everyday question whose cached verdict is dropped first
                # (no id in it: a text with one is judged once more without it); a
                # hit: the bench question, judged the turn before
                text = (
                    _questions()[i % len(_questions())] if kind == "miss" else QUESTION
                )
                if kind == "miss":
                    _verdict_forget(text)
                query = TextVector(text)
                query.get()  # the turn's shared vector, embedded before admission
                wall, cpu = time.perf_counter(), time.thread_time()
                safety_services.input_moderate(
                    user=user,
                    text=text,
                    query=query,
                    surface=ModerationEvent.Surface.CHAT,
                )
                spent = (
                    (time.perf_counter() - wall) * 1000,
                    (time.thread_time() - cpu) * 1000,
                )
                if i > 0:  # the first of each: imports and the classifier's load
                    timings[kind].append(spent)
    load_pin(plan)
    pinning = plan.describe() + (
        " (measured in the bench process, on the web core: one BLAS thread as "
        "chatsite.blas_threads sets)"
    )
    rows = []
    for kind in ("hit", "miss"):
        wall = [w for w, _ in timings[kind]]
        cpu = [c for _, c in timings[kind]]
        rows.append(
            _row(
                f"input moderation per turn p50, verdict cache {kind}",
                statistics.median(wall),
                "ms",
                pinning,
                f"{len(wall)} turns, turn vector embedded before; CPU p50 "
                f"{statistics.median(cpu):.2f} ms, wall p99 {pct(wall, 99):.2f} ms",
            )
        )
    return rows


def hot_path_rows(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Measure and return the plain turn's rows of the goal table (module docstring),
    each recorded with :func:`bench.record.bench_record` and printed.

    ``args``: ``turns`` (c=1 turns), ``users``, ``rounds`` (the burst),
    ``moderation_turns`` (0: no moderation rows). Needs the dev services (migrated).
    """
    plan = pinning_plan()
    print(f"\nhot path of a plain turn; pinning: {plan.describe()}; {load_note()}")
    rows = web_rows(args, plan)
    if args.moderation_turns:
        rows += moderation_rows(args, plan)
    for row in rows:
        print(
            f"  {row['measure']:52s} {row['value']:9.3f} {row['unit']:3s}  "
            f"goal {row['goal'] or '-':9s} [{row['params']}]"
        )
        bench_record(
            bench="turn_hot_path",
            metric=row["measure"],
            value=row["value"],
            unit=row["unit"],
            params=f"{row['params']}; {row['pinning']}",
            goal=row["goal"],
        )
    print(f"  load after: {load_note()}")
    return rows
