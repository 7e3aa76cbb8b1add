"""Pin a benchmark's processes to cores: the measured server on one, the load on another.

On a small machine the benchmark's client, the workers, Redis and PostgreSQL share the
cores with the web process, so a wall-clock figure measures all of them together.
Pinned (``os.sched_setaffinity``, what ``taskset`` does), the web process has a core
of its own and its CPU time per unit (read from ``/proc``, :mod:`bench.procstat`)
is its own cost. Every figure a pinned benchmark prints says how it was pinned
(:meth:`Pinning.describe`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

# The cores this process could use when the module was imported (before any pinning).
_CORES = sorted(os.sched_getaffinity(0))


@dataclass(frozen=True)
class Pinning:
    """Cores of the measured server (``web``) and of everything else (``load``);
    both empty: nothing is pinned (fewer than 2 cores, or asked not to)."""

    web: frozenset[int]
    load: frozenset[int]

    @property
    def active(self) -> bool:
        """Whether processes are pinned."""
        return bool(self.web and self.load)

    def describe(self) -> str:
        """The pinning as the figures' params say it ("web core 0, rest core 1")."""
        if not self.active:
            return "unpinned"
        return f"web core {_cores(self.web)}, rest core {_cores(self.load)}"

    def pin(self, pid: int, *, web: bool) -> None:
        """Pin process ``pid`` and its threads to the web or the load cores (no-op
        unpinned; a process that has gone or is not ours to pin is left alone)."""
        if not self.active:
            return
        cores = self.web if web else self.load
        for tid in _threads(pid):
            try:
                os.sched_setaffinity(tid, cores)
            except (ProcessLookupError, PermissionError):
                continue

    def pin_tree(self, pid: int, *, web: bool) -> None:
        """:meth:`pin` ``pid`` and its child processes (a server that forks)."""
        self.pin(pid, web=web)
        for child in _children(pid):
            self.pin_tree(child, web=web)


def pinning_plan(enabled: bool = True) -> Pinning:
    """The pinning for this machine: the first core this process could use (when
    this module was imported, before any pinning) for the web process, the next for
    the rest; unpinned with fewer than two or when not ``enabled``."""
    allowed = _CORES
    if not enabled or len(allowed) < 2:
        return Pinning(frozenset(), frozenset())
    return Pinning(frozenset(allowed[:1]), frozenset(allowed[1:2]))


def service_pids(var: Path) -> dict[str, int]:
    """The pids of the Redis and PostgreSQL that ``scripts/services.py`` started under
    ``var`` (``.var/`` or ``.var/test/``); a service not running there is absent."""
    found = {}
    for name, path in (
        ("redis", var / "redis" / "redis.pid"),
        ("postgres", var / "pg" / "data" / "postmaster.pid"),
    ):
        try:
            pid = int(path.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue
        if Path(f"/proc/{pid}").exists():
            found[name] = pid
    return found


def _cores(cores: frozenset[int]) -> str:
    return ",".join(str(c) for c in sorted(cores))


def _threads(pid: int) -> list[int]:
    try:
        return [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return []


def _children(pid: int) -> list[int]:
    out: list[int] = []
    for tid in _threads(pid):
        try:
            text = Path(f"/proc/{pid}/task/{tid}/children").read_text()
        except OSError:
            continue
        out += [int(c) for c in text.split()]
    return out
