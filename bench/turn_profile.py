"""Where a chat turn's time goes inside the web process (``bench/turn_overhead.py
--profile N``).

In this process: the POST through Django's test client (the site's middleware and the
real view, in this thread, so cProfile sees all of it) and the stream through
``chatsite.asgi.application`` up to its first token frame; a scripted worker runs as a
process. Each stage is timed by wrapping the function that does it (ms per turn,
median of the turns after the first):

- session/auth + middleware: the POST minus the view's service (``turn_start``);
- context: the prompt built (history, embeddings and retrieval, token counting) and,
  inside it, ``context_build`` (token counting under the budget);
- admission: ``generation_admit`` and, inside it, suspension, input moderation, plan,
  routing, quota seeding and reservation, admission control;
- store: the transaction that stores the messages; enqueue: ``generation_submit``;
- relay: GET sent -> first frame, -> first token frame.

Each turn is run twice: once unprofiled, for the POST's own CPU time (this thread's,
``time.thread_time``: the test client runs the view in it; in-process, so no pinning
applies beyond the machine's), then under cProfile for the stages. Also per turn:
database queries and Redis round trips (sync and async commands, a
pipeline counted once), and the top functions of the POST by cumulative time.
"""

from __future__ import annotations

import asyncio
import cProfile
import functools
import io
import pstats
import statistics
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

STAGES: list[tuple[str, str, str]] = [
    # (label, module, attribute): the attribute is replaced by a timed wrapper
    ("turn_start (the view's service)", "conversations.services", "turn_start"),
    ("  context: prompt_build", "conversations.services.turns.run", "prompt_build"),
    ("    history selectors", "conversations.prompt_history", "history_and_summary"),
    ("    memory: turn_context", "conversations.services.turns.prompt", "turn_context"),
    ("      context_build (counting)", "memory.context", "context_build"),
    (
        "  generation_start",
        "conversations.services.turns.run.generations",
        "generation_start",
    ),
    (
        "    admission: generation_admit",
        "gateway.generations.start",
        "generation_admit",
    ),
    (
        "      suspension_check",
        "gateway.generations.admission.safety_selectors",
        "suspension_check",
    ),
    ("      input_check (moderation)", "gateway.generations.admission", "input_check"),
    ("      plan_for_user", "gateway.generations.admission.selectors", "plan_for_user"),
    ("      pool_choose", "gateway.generations.admission.routing", "pool_choose"),
    (
        "      quota_seed_from_records",
        "gateway.generations.admission",
        "quota_seed_from_records",
    ),
    ("      quota_reserve", "gateway.generations.admission.quota", "quota_reserve"),
    ("      cache_prepare", "gateway.generations.admission.cache", "cache_prepare"),
    ("      pool_admit", "gateway.generations.admission.routing", "pool_admit"),
    (
        "    enqueue: generation_submit",
        "gateway.generations.start",
        "generation_submit",
    ),
    (
        "  default_model",
        "conversations.services.turns.run.gateway_selectors",
        "default_model",
    ),
    (
        "  cache_opt_in",
        "conversations.services.turns.run.gateway_selectors",
        "cache_opt_in",
    ),
]


class Counters:
    """Thread-safe per-turn tallies: stage times (ms), DB queries, Redis round trips."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.times: dict[str, list[float]] = defaultdict(list)
        self.turn: dict[str, float] = defaultdict(float)
        self.queries = 0
        self.redis = 0
        self.sql: list[str] = []
        self.commands: list[str] = []

    def reset_turn(self) -> None:
        with self.lock:
            self.turn = defaultdict(float)
            self.queries = self.redis = 0
            self.sql, self.commands = [], []

    def end_turn(self) -> None:
        for label, ms in self.turn.items():
            self.times[label].append(ms)


def _resolve(dotted: str) -> Any:
    import importlib

    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for name in parts[i:]:
            obj = getattr(obj, name)
        return obj
    raise ImportError(dotted)


def _timed(counters: Counters, label: str, fn: Callable) -> Callable:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            with counters.lock:
                counters.turn[label] += (time.perf_counter() - started) * 1000

    return wrapper


def instrument(counters: Counters) -> None:
    """Wrap the stages, the database cursor and the Redis clients to count them."""
    import redis.asyncio.client as aredis
    import redis.client as sredis
    from django.db.backends import utils as db_utils

    for label, module, attr in STAGES:
        owner = _resolve(module)
        setattr(owner, attr, _timed(counters, label, getattr(owner, attr)))

    for cls in (db_utils.CursorWrapper, db_utils.CursorDebugWrapper):
        for name in ("execute", "executemany"):
            original = getattr(cls, name)

            def counted(
                self: Any, sql: Any, *a: Any, _o: Callable = original, **k: Any
            ) -> Any:
                with counters.lock:
                    counters.queries += 1
                    counters.sql.append(str(sql)[:90])
                return _o(self, sql, *a, **k)

            setattr(cls, name, counted)

    def count_redis(what: str) -> None:
        with counters.lock:
            counters.redis += 1
            counters.commands.append(what)

    sync_exec = sredis.Redis.execute_command

    def sync_command(self: Any, *args: Any, **options: Any) -> Any:
        count_redis(str(args[0]))
        return sync_exec(self, *args, **options)

    sredis.Redis.execute_command = sync_command
    sync_pipe = sredis.Pipeline.execute

    def sync_pipeline(self: Any, *args: Any, **kwargs: Any) -> Any:
        count_redis(
            "pipeline[" + ",".join(str(c[0][0]) for c in self.command_stack) + "]"
        )
        return sync_pipe(self, *args, **kwargs)

    sredis.Pipeline.execute = sync_pipeline
    async_exec = aredis.Redis.execute_command

    async def async_command(self: Any, *args: Any, **options: Any) -> Any:
        count_redis("async " + str(args[0]))
        return await async_exec(self, *args, **options)

    aredis.Redis.execute_command = async_command
    async_pipe = aredis.Pipeline.execute

    async def async_pipeline(self: Any, *args: Any, **kwargs: Any) -> Any:
        count_redis(
            "async pipeline[" + ",".join(str(c[0][0]) for c in self.command_stack) + "]"
        )
        return await async_pipe(self, *args, **kwargs)

    aredis.Pipeline.execute = async_pipeline


async def _stream_first(url: str, cookie: str) -> tuple[float, float]:
    """GET the stream through the ASGI app; return (ms to first frame, ms to first
    token frame), then read on to the end (the answer settles)."""
    from tests.sse import asgi_sse

    started = time.perf_counter()
    marks: dict[str, float] = {}

    def stop(result: Any) -> bool:
        now = (time.perf_counter() - started) * 1000
        marks.setdefault("first", now)
        if any(e.event == "token" for e in result.events):
            marks.setdefault("token", now)
        return any(e.event in ("done", "error") for e in result.events)

    await asgi_sse(url, cookie=cookie, stop_when=stop)
    return marks.get("first", float("nan")), marks.get("token", float("nan"))


def in_process_settings(*, moderation: bool) -> None:
    """Set what an in-process turn bench needs of the settings: no rate limit in
    the way, the test client's host, DEBUG off as deployed (no query log), input and
    output moderation on or off (``moderation``), no background jobs after a turn."""
    from django.conf import settings

    settings.CHAT_MESSAGE_RATE = "100000/m"
    settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "testserver"]
    settings.DEBUG = False
    settings.SAFETY_INPUT_ENABLED = moderation
    settings.SAFETY_OUTPUT_ENABLED = moderation
    settings.CHAT_BACKGROUND_JOBS = False


def profile_run(turns: int, *, memory: bool) -> None:
    """Run ``turns`` turns in this process and print the breakdown (module docstring)."""
    import os

    from django.test import Client

    from bench.cpu_pin import (
        load_note,
        load_pin,
        load_pin_services,
        pinning_plan,
        web_pin,
    )
    from bench.turn_overhead import CHAT_WORKER, EMBED_WORKER, QUESTION, users_setup
    from tests.sse import session_cookie
    from tests.stack import stack_env, worker_processes

    in_process_settings(moderation=memory)  # plain: no moderation either way
    env = stack_env({"LOG_LEVEL": "WARNING"}, for_tests=False)
    workers = [CHAT_WORKER] + ([EMBED_WORKER] if memory else [])
    counters = Counters()
    plan = pinning_plan()
    load_pin(plan)  # the workers started next inherit the load cores
    with worker_processes(workers, env):
        web_pin(plan, os.getpid())  # this process is the web one here
        load_pin_services(plan)
        print(f"pinning: {plan.describe()} (the web process: this one); {load_note()}")
        user = users_setup(1, memory=memory)[0]
        client = Client()
        client.force_login(user)
        cookie = session_cookie(client)
        instrument(counters)
        import chatsite.asgi  # noqa: F401  what the web process imports (its warm-up)

        # CPU time, not wall: the web core's cost (waits on PostgreSQL and Redis,
        # on the other core, count in the stage times above, not here)
        profiler = cProfile.Profile(time.thread_time)
        cold_profiler = cProfile.Profile(time.thread_time)
        posts, firsts, tokens, queries, round_trips = [], [], [], [], []
        post_cpu: list[float] = []
        sample_sql: list[str] = []
        sample_redis: list[str] = []
        for i in range(turns):
            counters.reset_turn()
            warm = i > 0
            # the POST's own CPU without the profiler's: measured on a turn of its own
            cpu_started = time.thread_time()
            response = client.post("/c/messages/", {"content": QUESTION})
            post_cpu.append((time.thread_time() - cpu_started) * 1000)
            assert response.status_code == 201, response.content[:300]
            url = response.json()["assistant_message"]["stream_url"]
            asyncio.run(_stream_first(url, cookie))  # settled before the next
            counters.reset_turn()
            started = time.perf_counter()
            active = profiler if warm else cold_profiler
            active.enable()
            response = client.post("/c/messages/", {"content": QUESTION})
            active.disable()
            post_ms = (time.perf_counter() - started) * 1000
            assert response.status_code == 201, response.content[:300]
            post_queries, post_redis = counters.queries, counters.redis
            sample_sql, sample_redis = list(counters.sql), list(counters.commands)
            url = response.json()["assistant_message"]["stream_url"]
            first, token = asyncio.run(_stream_first(url, cookie))
            if warm:
                counters.end_turn()
                posts.append(post_ms)
                firsts.append(first)
                tokens.append(token)
                queries.append(post_queries)
                round_trips.append(post_redis)
            else:
                print(
                    f"first (cold) turn in this process: POST {post_ms:.1f} ms, "
                    f"stream GET -> first token {token:.1f} ms"
                )
    n = len(posts)
    med = statistics.median
    print(
        f"\nin-process turns ({'memory + moderation' if memory else 'plain'}), n={n}, "
        f"medians; load average {os.getloadavg()}"
    )
    print(f"  POST (test client, whole, profiled) {med(posts):7.2f} ms")
    print(
        f"  POST's own CPU, unprofiled (thread) {med(post_cpu[1:] or post_cpu):7.2f} ms"
    )
    view = med(counters.times["turn_start (the view's service)"])
    print(f"  session/auth + middleware + view glue {med(posts) - view:5.2f} ms")
    for label, _, _ in STAGES:
        values = counters.times.get(label)
        if values:
            print(f"  {label:37s} {med(values):7.2f} ms")
    print(f"  relay: GET -> first frame           {med(firsts):7.2f} ms")
    print(f"  relay: GET -> first token frame     {med(tokens):7.2f} ms")
    print(
        f"  DB queries per POST {med(queries):.0f}; Redis round trips per POST {med(round_trips):.0f}"
    )
    print("  queries of the last POST:")
    for sql in sample_sql:
        print(f"    {sql}")
    print("  Redis round trips of the last POST: " + ", ".join(sample_redis))
    if os.environ.get("TURN_PROFILE_OUT"):  # pstats file of the warm POSTs
        profiler.dump_stats(os.environ["TURN_PROFILE_OUT"])
    for title, prof in (("warm POSTs", profiler), ("the cold POST", cold_profiler)):
        out = io.StringIO()
        stats = pstats.Stats(prof, stream=out)
        stats.sort_stats("cumulative").print_stats(45)
        print(f"\ncProfile of {title} (cumulative, CPU time of this thread):")
        print("\n".join(out.getvalue().splitlines()[:75]))
        out = io.StringIO()
        pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(25)
        print(f"\ncProfile of {title} (own time, CPU):")
        print("\n".join(out.getvalue().splitlines()[:40]))
