"""Counters the capacity benchmark reads before and after a run: CPU seconds of the web
and worker processes (/proc), Redis commands and bytes (INFO commandstats, INFO
stats), PostgreSQL statements, transactions and WAL position.

A :class:`Counters` is one reading; ``b - a`` of two readings is what happened between
them. Redis counts are what the one node the benchmark talks to saw: on a cluster a
shard sees its share of them (keys spread by hash slot).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from bench.procstat import proc_cpu_s

# Commands this benchmark itself sends to read the counters: not the product's.
PROBE_COMMANDS = frozenset({"info", "config|get", "ping"})
# How long after a run its PostgreSQL counts are complete, s: backends report their
# statistics when idle, at most once a second (PostgreSQL 15+, PGSTAT_MIN_INTERVAL),
# and no counter tells when they have (this process's own reads move them too).
PG_STATS_FLUSH_S = 1.5


@dataclass
class Counters:
    """One reading. CPU in core-seconds; ``redis_calls`` per command (INFO's
    ``cmdstat_<name>`` ``calls``); ``redis_bytes`` net input + output bytes;
    ``pg_statements`` calls summed over pg_stat_statements (None without it);
    ``pg_xacts`` commits + rollbacks of the database; ``pg_wal`` the WAL insert
    position in bytes; ``wall`` time.monotonic() s."""

    wall: float
    web_cpu: float
    worker_cpu: float
    redis_calls: dict[str, int] = field(default_factory=dict)
    redis_bytes: int = 0
    pg_statements: int | None = None
    pg_xacts: int = 0
    pg_wal: int = 0

    def __sub__(self, before: Counters) -> Delta:
        calls = {
            name: n - before.redis_calls.get(name, 0)
            for name, n in self.redis_calls.items()
            if name not in PROBE_COMMANDS
        }
        statements = (
            None
            if self.pg_statements is None or before.pg_statements is None
            else self.pg_statements - before.pg_statements
        )
        return Delta(
            wall_s=self.wall - before.wall,
            web_cpu_s=self.web_cpu - before.web_cpu,
            worker_cpu_s=self.worker_cpu - before.worker_cpu,
            redis_calls={k: v for k, v in calls.items() if v},
            redis_bytes=self.redis_bytes - before.redis_bytes,
            pg_statements=statements,
            pg_xacts=self.pg_xacts - before.pg_xacts,
            pg_wal_bytes=self.pg_wal - before.pg_wal,
        )


@dataclass
class Delta:
    """What happened between two :class:`Counters` readings (same units)."""

    wall_s: float
    web_cpu_s: float
    worker_cpu_s: float
    redis_calls: dict[str, int]
    redis_bytes: int
    pg_statements: int | None
    pg_xacts: int
    pg_wal_bytes: int

    @property
    def redis_ops(self) -> int:
        """Redis commands, all kinds (the benchmark's own reads left out)."""
        return sum(self.redis_calls.values())


def _redis_calls(redis: Any) -> dict[str, int]:
    return {
        name.removeprefix("cmdstat_"): int(stats["calls"])
        for name, stats in redis.info("commandstats").items()
    }


def _redis_bytes(redis: Any) -> int:
    stats = redis.info("stats")
    return int(stats["total_net_input_bytes"]) + int(stats["total_net_output_bytes"])


def _pg(cursor: Any) -> tuple[int | None, int, int]:
    """(statements from pg_stat_statements or None, transactions, WAL position)."""
    cursor.execute(
        "SELECT xact_commit + xact_rollback, pg_wal_lsn_diff(pg_current_wal_insert_lsn(),"
        " '0/0')::bigint FROM pg_stat_database WHERE datname = current_database()"
    )
    xacts, wal = cursor.fetchone()
    statements = None
    cursor.execute("SELECT to_regclass('pg_stat_statements') IS NOT NULL")
    if cursor.fetchone()[0]:
        try:
            cursor.execute(
                "SELECT coalesce(sum(calls), 0)::bigint FROM pg_stat_statements "
                "WHERE dbid = (SELECT oid FROM pg_database "
                "WHERE datname = current_database())"
            )
            statements = int(cursor.fetchone()[0])
        except Exception:  # noqa: BLE001 - the view exists but the library is not loaded
            statements = None
    return statements, int(xacts), int(wal)


def counters_read(
    *, redis: Any, web_pids: list[int], worker_pids: list[int]
) -> Counters:
    """Read every counter now. ``redis`` is a redis-py client on the product's node."""
    from django.db import connection

    with connection.cursor() as cursor:
        statements, xacts, wal = _pg(cursor)
    return Counters(
        wall=time.monotonic(),
        web_cpu=sum(proc_cpu_s(pid) for pid in web_pids),
        worker_cpu=sum(proc_cpu_s(pid) for pid in worker_pids),
        redis_calls=_redis_calls(redis),
        redis_bytes=_redis_bytes(redis),
        pg_statements=statements,
        pg_xacts=xacts,
        pg_wal=wal,
    )


def probe_bytes_measure(*, redis: Any, readings: int = 5) -> int:
    """The Redis bytes (in + out) one :func:`counters_read` itself moves: the median
    of back-to-back readings' differences (the INFO replies are a few kB, more than a
    quiet second of the product's own traffic). Subtract it once per window."""
    sizes = []
    last = _redis_bytes(redis)
    for _ in range(readings):
        _redis_calls(redis)
        now = _redis_bytes(redis)
        sizes.append(now - last)
        last = now
    return sorted(sizes)[len(sizes) // 2]


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
    errors: dict[str, int]

    @property
    def total_tokens(self) -> int:
        return self.n * self.tokens


def window_sum(a: Delta, b: Delta, *, probe_bytes: int) -> Delta:
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
