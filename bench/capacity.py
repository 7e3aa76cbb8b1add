"""The capacity model: unit costs measured here, the fleet they imply at the product's
peak, and the model checked against two load levels run here.

    .venv/bin/python bench/capacity.py [--calibrate 40] [--cal-tokens 10 60]
        [--levels 100 400] [--tokens 60] [--delay-ms 50] [--idle-s 3]
        [--markdown FILE]

Runs on the dev services (`make migrate` first). One daphne (pinned to core 0 where
the machine has two or more; this client and the worker to the others), a bench user
with no limits (bench/sse_fanout.py's) and, per run, N turns held until all N streams
are open, then one scripted worker (``--concurrency N``, T tokens ``--delay-ms``
apart, 20 tokens/s by default) that streams them all at once (as bench/sse_fanout.py).

Per run, counters before and after (bench/capacity_probe.py): daphne's CPU from
/proc, Redis commands (INFO commandstats) and bytes (INFO stats), PostgreSQL
transactions, statements (pg_stat_statements, when loaded) and WAL bytes, and the
worker's CPU from the moment it is up (its start-up left out). The worker's own start
(between the POSTs and the streaming) is left out of every window.

1. idle: web + worker up, no load, ``--idle-s`` s: the time-based rates;
2. calibration: ``--calibrate`` turns at each of two answer lengths
   (``--cal-tokens``): two runs fix each cost's per-turn and per-token (per-frame for
   web CPU) parts (bench/capacity_model.py ``two_point_fit``);
3. validation: ``--levels`` concurrent streams of ``--tokens`` tokens: the model's
   web CPU and Redis commands from the run's turns and tokens alone, against what
   was measured (goal: within 20 %);
4. the projection for the peak (5,000 messages/s, 25,000 streams, 2.5 M tokens/s),
   each figure with its formula.

The client, the worker, PostgreSQL and Redis share the machine: CPU comes from /proc
per process, so other load slows the run but moves the per-unit figures less.
"""

from __future__ import annotations

import asyncio
import os
import resource
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.boot import django_start, option_parser  # noqa: E402
from bench.capacity_model import (  # noqa: E402
    Budgets,
    Peak,
    UnitCosts,
    fleet_project,
    two_point_fit,
)
from bench.capacity_probe import (  # noqa: E402
    PG_STATS_FLUSH_S,
    Counters,
    Delta,
    counters_read,
    probe_bytes_measure,
)
from bench.record import figures_record  # noqa: E402
from bench.sse_wire import StreamStats, stream_follow  # noqa: E402

PASSWORD = "ssebench-pass-123"
GOAL = 0.20  # the model's prediction within 20 % of the measured figure (issue 28)


@dataclass
class Run:
    """One run: ``n`` turns of ``tokens`` tokens; what the clients read and the
    counters' difference (``delta``, the POSTs' window plus the streaming's;
    ``posting``, the first alone: the POSTs and the streams' opening)."""

    n: int
    tokens: int
    completed: int
    frames: int
    delta: Delta
    posting: Delta

    @property
    def total_tokens(self) -> int:
        return self.n * self.tokens


# The answers' text: sentences of 14 words (a word a token), so that output
# moderation's windows (a sentence each, safety/output.py) fall as in ordinary prose.
SENTENCE = "The relay sends this answer to the page a few words at a time."


def answer_text(tokens: int) -> str:
    """``tokens`` words of :data:`SENTENCE` repeated (the scripted engine emits a word
    a token)."""
    words = SENTENCE.split()
    return " ".join(words[i % len(words)] for i in range(tokens))


def _worker_args(n: int, tokens: int, delay_ms: float) -> list[str]:
    from bench.sse_fanout import POOL

    return [
        "--pool", POOL, "--engine", "scripted", "--concurrency", str(max(1, n)),
        "--delay-ms", str(delay_ms), "--script-text", answer_text(tokens),
    ]  # fmt: skip


def _pin(pid: int, cores: set[int]) -> None:
    if cores:
        os.sched_setaffinity(pid, cores)


def _cores() -> tuple[set[int], set[int]]:
    """(the web's cores, everyone else's): core 0 and the rest, where there are 2+."""
    mine = sorted(os.sched_getaffinity(0))
    if len(mine) < 2:
        return set(), set()
    return {mine[0]}, set(mine[1:])


def _login(base: str) -> dict[str, str]:
    """Sign the bench user in (a PBKDF2 run: kept out of every measured window);
    return the session's cookies."""
    import httpx

    from bench.chat import login

    with httpx.Client(base_url=base, timeout=60) as http:
        login(http, username="ssebench", password=PASSWORD)
        return dict(http.cookies.items())


async def _turns_post(base: str, cookies: dict[str, str], n: int) -> list[str]:
    """POST ``n`` messages as the chat page does, 8 at a time; return stream paths."""
    import httpx

    gate = asyncio.Semaphore(8)
    headers = {"X-CSRFToken": cookies["csrftoken"]}
    async with httpx.AsyncClient(base_url=base, timeout=120, cookies=cookies) as http:

        async def one(i: int) -> str:
            async with gate:
                r = await http.post(
                    "/c/messages/", data={"content": f"Turn {i}."}, headers=headers
                )
                r.raise_for_status()
                return r.json()["assistant_message"]["stream_url"]

        return list(await asyncio.gather(*(one(i) for i in range(n))))


def run_one(web, env: dict, n: int, tokens: int, delay_ms: float, load: set) -> Run:  # noqa: ANN001
    """Post ``n`` turns through ``web``, open their streams, stream them with one
    worker; return the :class:`Run` (see the module docstring for the windows)."""
    from bench.sse_fanout import POOL
    from inference import protocol
    from inference.connections import redis_sync
    from tests.stack import worker_processes

    redis = redis_sync()
    probe = probe_bytes_measure(redis=redis)
    pids = [web.process.pid]
    hold = "capacity-bench-hold"
    redis.zadd(protocol.workers_key(POOL), {hold: time.time() + 3600})
    cookies = _login(web.base)
    cookie = "; ".join(f"{k}={v}" for k, v in cookies.items())
    before = counters_read(redis=redis, web_pids=pids, worker_pids=[])
    paths = asyncio.run(_turns_post(web.base, cookies, n))
    host, port = web.base[7:].split(":")
    stats = [StreamStats() for _ in paths]

    async def stream_all() -> tuple[Delta, Delta]:
        opened = [asyncio.Event() for _ in paths]
        tasks = [
            asyncio.create_task(stream_follow(host, int(port), p, cookie, s, e))
            for p, s, e in zip(paths, stats, opened, strict=True)
        ]
        deadline = time.monotonic() + 120
        while sum(e.is_set() for e in opened) < n and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        read = asyncio.to_thread  # the ORM's reads may not run on the event loop
        posted = await read(counters_read, redis=redis, web_pids=pids, worker_pids=[])
        redis.zrem(protocol.workers_key(POOL), hold)
        with worker_processes([_worker_args(n, tokens, delay_ms)], env) as procs:
            _pin(procs[0].pid, load)
            workers = [procs[0].pid]
            start = await read(
                counters_read, redis=redis, web_pids=pids, worker_pids=workers
            )
            await asyncio.wait(tasks, timeout=300)
            await asyncio.sleep(PG_STATS_FLUSH_S)
            end = await read(
                counters_read, redis=redis, web_pids=pids, worker_pids=workers
            )
        return posted - before, end - start

    posting, streaming = asyncio.run(stream_all())
    return Run(
        n=n,
        tokens=tokens,
        completed=sum(s.done for s in stats),
        frames=sum(s.frames for s in stats),
        delta=_window_sum(posting, streaming, probe_bytes=2 * probe),
        posting=posting,
    )


def _window_sum(a: Delta, b: Delta, *, probe_bytes: int) -> Delta:
    """Two windows' counts added; ``probe_bytes`` (this benchmark's own INFO traffic)
    taken out of the Redis bytes."""
    calls = dict(a.redis_calls)
    for name, count in b.redis_calls.items():
        calls[name] = calls.get(name, 0) + count
    statements = (
        None
        if a.pg_statements is None or b.pg_statements is None
        else a.pg_statements + b.pg_statements
    )
    return Delta(
        wall_s=a.wall_s + b.wall_s,
        web_cpu_s=a.web_cpu_s + b.web_cpu_s,
        worker_cpu_s=a.worker_cpu_s + b.worker_cpu_s,
        redis_calls=calls,
        redis_bytes=max(0, a.redis_bytes + b.redis_bytes - probe_bytes),
        pg_statements=statements,
        pg_xacts=a.pg_xacts + b.pg_xacts,
        pg_wal_bytes=a.pg_wal_bytes + b.pg_wal_bytes,
    )


def idle_measure(web, env: dict, seconds: float, load: set) -> Delta:  # noqa: ANN001
    """Web + one worker up, no load, for ``seconds``: the time-based counts."""
    from inference.connections import redis_sync
    from tests.stack import worker_processes

    redis = redis_sync()
    probe = probe_bytes_measure(redis=redis)
    with worker_processes([_worker_args(1, 1, 0)], env) as procs:
        _pin(procs[0].pid, load)
        pids, workers = [web.process.pid], [procs[0].pid]
        start: Counters = counters_read(redis=redis, web_pids=pids, worker_pids=workers)
        time.sleep(seconds)
        idle = counters_read(redis=redis, web_pids=pids, worker_pids=workers) - start
    idle.redis_bytes = max(0, idle.redis_bytes - probe)
    return idle


def units_fit(idle: Delta, a: Run, b: Run) -> UnitCosts:
    """Unit costs from the idle window and two calibration runs (idle rates taken
    out of each run's counts by its wall time)."""
    idle_s = max(idle.wall_s, 1e-9)
    web_idle = idle.web_cpu_s / idle_s
    ops_idle = idle.redis_ops / idle_s
    bytes_idle = idle.redis_bytes / idle_s

    def point(run: Run, y: float, idle_rate: float, x: float) -> tuple:
        return (run.n, x, y - idle_rate * run.delta.wall_s)

    def fit(get, rate: float):  # noqa: ANN001, ANN202
        return two_point_fit(
            point(a, get(a), rate, a.total_tokens),
            point(b, get(b), rate, b.total_tokens),
        )

    stmts = [r.delta.pg_statements for r in (a, b)]
    return UnitCosts(
        web=fit(lambda r: r.delta.web_cpu_s, web_idle),
        redis_ops=fit(lambda r: r.delta.redis_ops, ops_idle),
        redis_bytes=fit(lambda r: r.delta.redis_bytes, bytes_idle),
        worker=fit(lambda r: r.delta.worker_cpu_s, 0.0),
        pg_statements_per_turn=None
        if None in stmts
        else sum(s or 0 for s in stmts) / (a.n + b.n),
        pg_xacts_per_turn=(a.delta.pg_xacts + b.delta.pg_xacts) / (a.n + b.n),
        pg_wal_bytes_per_turn=(a.delta.pg_wal_bytes + b.delta.pg_wal_bytes)
        / (a.n + b.n),
        web_idle_cores=web_idle,
        redis_idle_ops_per_s=ops_idle,
        redis_idle_bytes_per_s=bytes_idle,
        frames=fit(lambda r: r.frames, 0.0),
    )


def validate(units: UnitCosts, run: Run) -> list[tuple[str, float, float]]:
    """(what, predicted, measured) for one validation run, predicted from its turns,
    tokens and wall time alone (the idle rates over the wall time): frames (shown,
    not judged), web CPU s and Redis commands."""
    wall = run.delta.wall_s
    turns, tokens = run.n, run.total_tokens
    web = units.web.predict(turns=turns, x=tokens) + units.web_idle_cores * wall
    ops = (
        units.redis_ops.predict(turns=turns, x=tokens)
        + units.redis_idle_ops_per_s * wall
    )
    return [
        ("frames", units.frames.predict(turns=turns, x=tokens), run.frames),
        ("web CPU s", web, run.delta.web_cpu_s),
        ("Redis commands", ops, run.delta.redis_ops),
    ]


def web_split(runs: list[Run]) -> tuple[float, float]:
    """(web CPU per turn of the POST and the stream's opening, s; web CPU of the
    streaming window per frame sent, s: an upper bound of a frame's cost, as it
    carries the settlement and every token's read too), over ``runs``."""
    turns = sum(r.n for r in runs)
    frames = sum(r.frames for r in runs)
    posting = sum(r.posting.web_cpu_s for r in runs)
    streaming = sum(r.delta.web_cpu_s - r.posting.web_cpu_s for r in runs)
    return posting / max(turns, 1), streaming / max(frames, 1)


def main() -> None:
    from bench.capacity_report import report_print

    parser = option_parser(
        __doc__.split("\n\n")[0],
        calibrate=40,
        cal_tokens=[10, 60],
        levels=[100, 400],
        tokens=60,
        delay_ms=50.0,
        idle_s=3.0,
        markdown="",
    )
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    django_start(
        {
            "INFERENCE_DEFAULT_POOL": "ssebench",
            "CHAT_MAX_TOKENS": str(max([*args.cal_tokens, args.tokens]) + 10),
            "CHAT_MESSAGE_RATE": "1000000/m",
            "SAFETY_INPUT_ENABLED": "0",
            "CHAT_BACKGROUND_JOBS": "0",
            "GATEWAY_QUEUE_THRESHOLD": "1000000",
            "GATEWAY_CACHE_ENABLED": "0",
            "GATEWAY_SEMANTIC_CACHE_ENABLED": "0",
            "INFERENCE_QUEUE_TIMEOUT_S": "600",
            "INFERENCE_NO_WORKER_GRACE_S": "600",
            "LOG_LEVEL": "WARNING",
        }
    )
    from django.conf import settings

    from bench.sse_fanout import bench_setup
    from tests.stack import stack_env, web_process

    bench_setup(PASSWORD)
    env = stack_env(for_tests=False)
    web_cores, load = _cores()
    _pin(0, load)
    load_start = os.getloadavg()
    with web_process(env) as web:
        _pin(web.process.pid, web_cores)
        idle = idle_measure(web, env, args.idle_s, load)
        cal = [
            run_one(web, env, args.calibrate, t, args.delay_ms, load)
            for t in args.cal_tokens
        ]
        units = units_fit(idle, *cal)
        runs = [
            run_one(web, env, n, args.tokens, args.delay_ms, load) for n in args.levels
        ]
    budgets = Budgets(
        coalesce_ms=settings.SSE_COALESCE_MS,
        frames_per_s_per_process=settings.SSE_FRAMES_PER_S,
    )
    rows = fleet_project(units, Peak(), budgets)
    checks = [(run, validate(units, run)) for run in runs]
    pinned = (
        f"web on core {sorted(web_cores)}, load on {sorted(load)}"
        if web_cores
        else "no pinning (1 core)"
    )
    machine = (
        f"{os.cpu_count()} cores, load average {load_start[0]:.2f} at the start, "
        f"{os.getloadavg()[0]:.2f} at the end; {pinned}"
    )
    page = report_print(
        units=units, idle=idle, cal=cal, checks=checks, rows=rows, args=args,
        machine=machine, goal=GOAL, split=web_split([*cal, *runs]),
    )  # fmt: skip
    if args.markdown:
        Path(args.markdown).write_text(page, encoding="utf-8")
    params = (
        f"cal {args.calibrate} turns x {args.cal_tokens} tokens, levels {args.levels} "
        f"x {args.tokens} tokens {args.delay_ms:g} ms apart; {machine}"
    )
    figures = [(r.what, r.value, r.unit, "") for r in rows]
    for run, check in checks:
        for what, predicted, measured in check[1:]:
            error = abs(predicted - measured) / max(measured, 1e-9) * 100
            figures.append(
                (f"model error, {what}, {run.n} streams", error, "%", "< 20 %")
            )
    figures_record(bench="capacity", params=params, figures=figures)


if __name__ == "__main__":
    main()
