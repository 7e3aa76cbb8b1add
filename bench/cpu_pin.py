"""Pin a benchmark's processes so that the web process's cost is measured per core:
the web process (uvicorn) on one core, everything else (this client, the workers,
PostgreSQL, Redis) on the others (``os.sched_setaffinity``, as ``taskset -p`` does).

Linux pins a thread, not a process: :func:`pid_pin` pins every thread of a process
(``/proc/<pid>/task``); threads it starts later inherit their creator's cores.
PostgreSQL's server forks a backend per connection, which inherits the server's
cores: the server and its children are pinned before the web process connects.

The web process's own CPU is read from its process CPU clock (nanoseconds):
:func:`web_cpu_ns`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.boot import ROOT

TICKS = os.sysconf("SC_CLK_TCK")  # /proc/<pid>/stat counts CPU time in ticks


@dataclass(frozen=True)
class Pinning:
    """Which cores the web process and the load side (everything else) run on."""

    web: frozenset[int]
    load: frozenset[int]

    def describe(self) -> str:
        """E.g. ``web on core 0; client, workers, PostgreSQL, Redis on core 1``."""
        if not self.web:
            return "not pinned (one core: web and load share it)"
        return (
            f"web on core {_cores(self.web)}; client, workers, PostgreSQL, Redis on "
            f"core {_cores(self.load)}"
        )


def _cores(cores: frozenset[int]) -> str:
    return ",".join(str(c) for c in sorted(cores))


def pinning_plan() -> Pinning:
    """The first core this process may use for the web process, the others for the
    load side; no pinning (empty ``web``) with a single core."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        return Pinning(web=frozenset(), load=frozenset(cores))
    return Pinning(web=frozenset(cores[:1]), load=frozenset(cores[1:]))


def pid_pin(pid: int, cores: frozenset[int]) -> int:
    """Pin every thread of process ``pid`` to ``cores``; return how many threads
    (0: the process is gone or not ours to pin)."""
    pinned = 0
    try:
        tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return 0
    for tid in tids:
        try:
            os.sched_setaffinity(tid, cores)
            pinned += 1
        except OSError:  # the thread ended meanwhile, or another user's process
            continue
    return pinned


def _children(pid: int) -> list[int]:
    """Direct children of ``pid`` (``/proc/<pid>/task/*/children``)."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        try:
            found += [int(c) for c in task.read_text().split()]
        except OSError:
            continue
    return found


def _pidfile(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def services_pids() -> list[int]:
    """PostgreSQL's server and backends and Redis of the dev services (``.var/``,
    scripts/services.py), those that exist."""
    pids: list[int] = []
    var = ROOT / ".var"
    postmaster = _pidfile(var / "pg" / "data" / "postmaster.pid")
    if postmaster is not None:
        pids += [postmaster, *_children(postmaster)]
    redis = _pidfile(var / "redis" / "redis.pid")
    if redis is not None:
        pids.append(redis)
    return pids


def load_pin(plan: Pinning, extra: Sequence[int] = ()) -> int:
    """Pin this process (its later children inherit it), the dev services and the
    ``extra`` pids (workers already started) to the load cores; return the number of
    threads pinned. A no-op without a plan (one core)."""
    if not plan.web:
        return 0
    return sum(
        pid_pin(pid, plan.load) for pid in [os.getpid(), *services_pids(), *extra]
    )


def load_pin_services(plan: Pinning) -> int:
    """Pin the dev services (PostgreSQL and its backends, Redis) to the load cores,
    not this process; return the number of threads pinned."""
    if not plan.web:
        return 0
    return sum(pid_pin(pid, plan.load) for pid in services_pids())


def web_pin(plan: Pinning, pid: int) -> int:
    """Pin every thread of the web process ``pid`` to the web core; return how many."""
    if not plan.web:
        return 0
    return pid_pin(pid, plan.web)


def process_cpu_clock(pid: int) -> int:
    """The clock id of the process ``pid``'s CPU clock (Linux's
    ``MAKE_PROCESS_CPUCLOCK(pid, CPUCLOCK_SCHED)``, what ``clock_getcpuclockid(3)``
    returns): the scheduler's nanosecond run time of all its threads, the ended ones
    included. A signed 32-bit value, as ``clockid_t``."""
    clock = ((~pid) << 3) | 2
    return clock


def web_cpu_ns(pid: int) -> int:
    """CPU time (ns) the process ``pid`` has used so far, all its threads, its ended
    ones included: its process CPU clock (:func:`process_cpu_clock`, the scheduler's
    nanosecond run time, as ``time.process_time`` reads for this process), so a
    window of one turn is measured to the microsecond. Where that clock cannot be
    read, ``/proc/<pid>/stat`` utime + stime (clock ticks: 10 ms steps)."""
    try:
        return time.clock_gettime_ns(process_cpu_clock(pid))
    except OSError:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) * 1_000_000_000 // TICKS


def load_note() -> str:
    """The machine's load, for every printed figure: cores and load averages."""
    one, five, fifteen = os.getloadavg()
    return f"{os.cpu_count()} cores, load average {one:.2f} {five:.2f} {fifteen:.2f}"
