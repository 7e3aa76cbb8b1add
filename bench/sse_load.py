"""The load side of ``bench/sse_fanout.py``: core pinning, per-core use and a
tick-batched scripted worker.

- **Pinning**: the web process on one core, everything else (the benchmark's client,
  the scripted worker, Redis, PostgreSQL) on another (:func:`pinned`, :func:`pin_tree`:
  ``sched_setaffinity`` of every thread of a process and of its children). A Linux
  affinity is per thread, so a process started while the caller is pinned inherits it.
- **Per-core use**: :class:`CoreUse` reads ``/proc/stat`` (every process on a core,
  other users' included), :func:`bench.procstat.proc_cpu_s` one process's own CPU.
- **The worker**: :func:`batched_worker` takes every queued job of a pool and writes,
  per tick, one token to every stream in ONE pipelined Redis round trip (raw RESP bytes
  built once: no per-command client work), as a batched engine's worker does per decode
  step; the ``meta`` events before the first tick and the ``done`` events after the last
  are one pipeline each, so every answer ends in the same tick.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Coroutine, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from bench.procstat import proc_cpu_s

T = TypeVar("T")
ALL_CORES = frozenset(range(os.cpu_count() or 1))


def cores_pick() -> tuple[int, int]:
    """(web core, load core): the first two cores this process may use; on a
    one-core machine both are that core (the figures then say so)."""
    mine = sorted(os.sched_getaffinity(0))
    return mine[0], mine[1] if len(mine) > 1 else mine[0]


def _threads(pid: int) -> list[int]:
    try:
        return [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except FileNotFoundError:
        return []


def _children(pid: int) -> list[int]:
    """The direct children of ``pid`` (from /proc/<pid>/task/*/children)."""
    found: list[int] = []
    for tid in _threads(pid):
        try:
            text = Path(f"/proc/{pid}/task/{tid}/children").read_text()
        except OSError:
            continue
        found.extend(int(c) for c in text.split())
    return found


def pin_tree(
    pid: int, cores: set[int] | frozenset[int], nice: int | None = None
) -> int:
    """Pin every thread of ``pid`` and of its descendants to ``cores`` (and give them
    the scheduling priority ``nice``, when given); return how many threads were
    pinned (a thread that ended meanwhile is skipped)."""
    pinned, todo = 0, [pid]
    while todo:
        p = todo.pop()
        for tid in _threads(p):
            try:
                os.sched_setaffinity(tid, cores)
                if nice is not None:
                    os.setpriority(os.PRIO_PROCESS, tid, nice)
                pinned += 1
            except OSError:
                pass
        todo.extend(_children(p))
    return pinned


@contextmanager
def pinned(cores: set[int]) -> Iterator[None]:
    """Run the block with this thread pinned to ``cores`` (what it starts inherits
    them), then pin it back to what it had."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cores)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def service_pids() -> dict[str, int]:
    """The pids of the Redis server and the PostgreSQL postmaster the settings name
    (``INFO server``; ``data_directory``/postmaster.pid): the load side's services."""
    from django.db import connection

    from inference.connections import redis_sync

    pids = {"redis": int(redis_sync().info("server")["process_id"])}
    with connection.cursor() as cur:
        cur.execute("SELECT setting FROM pg_settings WHERE name = 'data_directory'")
        data = cur.fetchone()[0]
    try:
        pids["postgres"] = int(Path(data, "postmaster.pid").read_text().split()[0])
    except OSError:  # another user's server on another machine: not pinned
        pass
    return pids


def tree_cpu_s(pid: int) -> float:
    """CPU seconds of ``pid`` and its live descendants (PostgreSQL's backends)."""
    total, todo = 0.0, [pid]
    while todo:
        p = todo.pop()
        try:
            total += proc_cpu_s(p)
        except OSError:
            continue
        todo.extend(_children(p))
    return total


def load_side_cpu_s(pids: dict[str, int]) -> dict[str, float]:
    """CPU s of the services' process trees (Redis, PostgreSQL's backends), by name,
    and of this process (``client``) alone: the benchmark starts the web server, which
    is not load; the worker reports its own (:attr:`Phases.cpu`)."""
    return {
        **{k: tree_cpu_s(p) for k, p in pids.items()},
        "client": proc_cpu_s(os.getpid()),
    }


def loop_run(coro: Coroutine[Any, Any, T], loop: str) -> T:
    """Run ``coro`` on a new event loop: ``uvloop`` (reads a socket for about half the
    CPU of asyncio's own loop: the load side stays light) or ``asyncio``."""
    factory = asyncio.new_event_loop
    if loop == "uvloop":
        import uvloop

        factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(coro)


@dataclass
class CoreUse:
    """Busy share of some cores between :meth:`start` and :meth:`stop` (0-1 each),
    from /proc/stat: every process on the core, not only ours."""

    cores: list[int]
    # after stop(): each core's share (0-1) in interrupts (irq + softirq: the
    # loopback's packets are processed there, in no process's CPU time)
    irq: dict[int, float] = field(default_factory=dict)
    _t0: dict[int, tuple[int, int, int]] = field(default_factory=dict)

    @staticmethod
    def read() -> dict[int, tuple[int, int, int]]:
        """Each core's (all ticks, idle ticks, interrupt ticks) from /proc/stat."""
        out: dict[int, tuple[int, int, int]] = {}
        for line in Path("/proc/stat").read_text().splitlines():
            name, *vals = line.split()
            if name.startswith("cpu") and name != "cpu":
                ticks = [int(v) for v in vals]
                idle = ticks[3] + ticks[4]  # idle + iowait
                out[int(name[3:])] = (sum(ticks[:8]), idle, ticks[5] + ticks[6])
        return out

    def start(self) -> None:
        self._t0 = self.read()

    def stop(self) -> dict[int, float]:
        busy, self.irq = self.between(self._t0, self.read(), self.cores)
        return busy

    @staticmethod
    def between(
        a: dict[int, tuple[int, int, int]],
        b: dict[int, tuple[int, int, int]],
        cores: list[int],
    ) -> tuple[dict[int, float], dict[int, float]]:
        """Each of ``cores``' busy and interrupt shares (0-1) from :meth:`read` ``a``
        to ``b``."""
        busy: dict[int, float] = {}
        irq: dict[int, float] = {}
        for c in cores:
            total = b[c][0] - a[c][0]
            busy[c] = 1 - (b[c][1] - a[c][1]) / total if total else 0.0
            irq[c] = (b[c][2] - a[c][2]) / total if total else 0.0
        return busy, irq


def _resp(*parts: bytes) -> bytes:
    out = [b"*%d\r\n" % len(parts)]
    for p in parts:
        out.append(b"$%d\r\n%s\r\n" % (len(p), p))
    return b"".join(out)


def _tick_bytes(keys: list[str], text: str) -> bytes:
    """One XADD of a ``token`` event per stream, as RESP (the same fields as
    :func:`inference.protocol.token_fields`)."""
    data = json.dumps({"t": text}, ensure_ascii=False).encode()
    return b"".join(
        _resp(b"XADD", k.encode(), b"*", b"e", b"token", b"d", data) for k in keys
    )


async def _replies(reader: asyncio.StreamReader, n: int) -> None:
    """Read ``n`` bulk-string replies (an XADD's entry id: two lines each)."""
    lines = 0
    while lines < 2 * n:
        chunk = await reader.read(1 << 20)
        if not chunk:
            raise ConnectionError("Redis closed the connection")
        if chunk.startswith(b"-") or b"\r\n-" in chunk:
            raise RuntimeError(chunk[:200].decode(errors="replace"))
        lines += chunk.count(b"\r\n")


@dataclass
class Phases:
    """What the worker reports: wall times (time.monotonic) of its first token tick,
    of its last token tick written and of the ``done`` events written; the web
    process's CPU seconds at each; the job ids it served; the ticks it wrote late
    (more than a tick behind schedule), the longest tick's round trip (ms) and the
    worker process's own CPU seconds (all of its run, and at each mark)."""

    jobs: list[str] = field(default_factory=list)
    at: dict[str, float] = field(default_factory=dict)
    web_cpu: dict[str, float] = field(default_factory=dict)
    late_ticks: int = 0
    tick_rtt_max_ms: float = 0.0
    cpu_s: float = 0.0
    cpu: dict[str, float] = field(default_factory=dict)


async def batched_worker(
    *, pool: str, expect: int, tokens: int, delay_ms: float, web_pid: int
) -> Phases:
    """Serve the ``expect`` jobs queued on ``pool`` (waits for them): ``meta`` for
    all, ``tokens`` ticks ``delay_ms`` apart (one token per stream per tick, one
    round trip per tick), then ``done`` for all. Returns the :class:`Phases`."""
    from django.conf import settings

    from inference import keys as rkeys
    from inference import protocol
    from inference.client import terminal_append
    from inference.connections import redis_async_new

    redis = redis_async_new(settings.REDIS_URL, max_connections=2)
    queue = rkeys.queue_key(pool)
    phases = Phases()
    while True:
        entries = await redis.xrange(queue)
        if len(entries) >= expect:
            break
        await asyncio.sleep(0.05)
    phases.jobs = [protocol.Job.from_fields(f).job_id for _id, f in entries][:expect]
    await redis.delete(queue)  # taken: no queue position is reported any more
    keys = [rkeys.gen_key(j) for j in phases.jobs]

    def mark(name: str) -> None:
        phases.at[name] = time.monotonic()
        phases.web_cpu[name] = proc_cpu_s(web_pid)
        phases.cpu[name] = time.process_time()

    start = time.time()
    async with redis.pipeline(transaction=False) as pipe:
        for k in keys:
            meta = protocol.event_fields(
                protocol.EVENT_META,
                {"model": "scripted-1", "worker": "batched", "queue_ms": 0},
            )
            pipe.xadd(k, meta)
            pipe.expire(k, 3600)
        await pipe.execute()
    kw: dict[str, Any] = redis.connection_pool.connection_kwargs
    reader, writer = await asyncio.open_connection(
        kw.get("host", "127.0.0.1"), kw.get("port", 6379)
    )
    hello = _resp(b"SELECT", str(kw.get("db", 0)).encode())
    if kw.get("password"):
        hello = _resp(b"AUTH", str(kw["password"]).encode()) + hello
    writer.write(hello)
    await reader.read(1024)
    blob = _tick_bytes(keys, "tok ")
    step = delay_ms / 1000
    due = time.monotonic()
    mark("tokens")
    for i in range(tokens):
        if i == tokens - 1:
            mark("last_tick")
        sent = time.monotonic()
        writer.write(blob)
        await _replies(reader, len(keys))
        phases.tick_rtt_max_ms = max(
            phases.tick_rtt_max_ms, (time.monotonic() - sent) * 1000
        )
        due += step
        rest = due - time.monotonic()
        if rest > 0:
            await asyncio.sleep(rest)
        elif rest < -step:
            phases.late_ticks += 1
    mark("tokens_end")
    latency_ms = int((time.time() - start) * 1000)
    usage = {"prompt_tokens": 10, "completion_tokens": tokens, "cached_tokens": 0}
    done = {
        "finish_reason": "stop",
        "usage": usage,
        "ttft_ms": 0,
        "latency_ms": latency_ms,
    }
    async with redis.pipeline(transaction=False) as pipe:
        for j in phases.jobs:
            terminal_append(
                pipe, job_id=j, event_type=protocol.EVENT_DONE, payload=done, ttl_s=3600
            )
        await pipe.execute()
    mark("done_written")
    writer.close()
    await redis.aclose()
    phases.cpu_s = time.process_time()
    return phases
