"""What the load side of bench/gateway_overhead.py spent while it measured a target.

With the web process (or LiteLLM's proxy) pinned to one core and the client, the
upstream, our worker, Redis and PostgreSQL to another (:mod:`bench.pinning`), a
wall-clock figure is the web's only while the load core keeps up. :class:`LoadUse`
adds up, over a target's rounds, how busy each core was (``/proc/stat``: every process
on it, a shared machine's other work included, :class:`bench.sse_load.CoreUse`) and
the CPU each part of the load side spent (``/proc/<pid>/stat`` of the part's process
and its children). A figure taken while the load core was at least
:data:`LOAD_SATURATED` busy measures the load side, not the gateway
(:func:`load_bound`), unless the harness (the bench's client and stand-in upstream)
still got the CPU when it asked: its threads' run-queue wait (``/proc/<pid>/task/*/
schedstat``, the scheduler's nanoseconds runnable but not running) under
:data:`HARNESS_WAIT_MAX` of the wall. A load core filled by the product's own parts
(our inference worker, Redis, PostgreSQL) slows only the target that owns them;
what the rule guards against is a harness too starved to send, read or stream on time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from bench.procstat import proc_cpu_s
from bench.sse_load import CoreUse, tree_cpu_s
from bench.sse_report import LOAD_SATURATED

__all__ = [
    "HARNESS_WAIT_MAX",
    "LOAD_SATURATED",
    "LoadUse",
    "load_bound",
    "load_said",
    "run_wait_s",
]

# The share of a round's wall a harness part may wait for the CPU (runnable, not
# running) before its round measures the harness rather than the target: a tenth.
HARNESS_WAIT_MAX = 0.1


def run_wait_s(pid: int) -> float | None:
    """Seconds the threads of process ``pid`` have waited on a run queue, summed
    (``/proc/<pid>/task/*/schedstat``'s second field, ns); None when the kernel does
    not keep it or the process is gone."""
    total = 0
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            try:
                total += int((task / "schedstat").read_text().split()[1])
            except (OSError, IndexError, ValueError):
                continue  # a thread that ended meanwhile
    except OSError:
        return None
    return total / 1e9


@dataclass
class LoadUse:
    """Core use and load-side CPU over one target's rounds at one level.

    ``cores``: (web core, load core), None unpinned (no core shares then);
    ``parts``: the load side's processes by name (``client``, ``upstream``,
    ``worker``, ``redis``, ``postgres``), those named in ``trees`` counted with
    their children (PostgreSQL's backends; not the client, whose children are the
    servers it started). ``harness``: the parts that are the bench's own (their
    run-queue wait is added up, :meth:`harness_wait`). Call :meth:`start` and
    :meth:`stop` around each round; the totals add up."""

    cores: tuple[int, int] | None
    parts: dict[str, int]
    trees: frozenset[str] = frozenset({"postgres"})
    harness: frozenset[str] = frozenset({"client", "upstream"})
    wall_s: float = 0.0
    busy_s: dict[str, float] = field(default_factory=lambda: {"web": 0.0, "load": 0.0})
    cpu_s: dict[str, float] = field(default_factory=dict)
    wait_s: dict[str, float] = field(default_factory=dict)
    _meter: CoreUse | None = None
    _cpu0: dict[str, float] = field(default_factory=dict)
    _wait0: dict[str, float | None] = field(default_factory=dict)

    def start(self) -> None:
        """Begin a round."""
        if self.cores is not None:
            self._meter = CoreUse(list(self.cores))
            self._meter.start()
        self._cpu0 = {name: self._cpu(name) for name in self.parts}
        self._wait0 = {
            name: run_wait_s(pid)
            for name, pid in self.parts.items()
            if name in self.harness
        }

    def _cpu(self, name: str) -> float:
        pid = self.parts[name]
        if name in self.trees:
            return tree_cpu_s(pid)
        try:
            return proc_cpu_s(pid)
        except OSError:
            return 0.0

    def stop(self, wall_s: float) -> None:
        """End a round that took ``wall_s`` seconds (the caller's clock)."""
        for name in self.parts:
            spent = self._cpu(name) - self._cpu0[name]
            self.cpu_s[name] = self.cpu_s.get(name, 0.0) + spent
        for name, before in self._wait0.items():
            after = run_wait_s(self.parts[name])
            if before is not None and after is not None:
                self.wait_s[name] = self.wait_s.get(name, 0.0) + after - before
        if self._meter is not None and self.cores is not None:
            busy = self._meter.stop()
            self.busy_s["web"] += busy[self.cores[0]] * wall_s
            self.busy_s["load"] += busy[self.cores[1]] * wall_s
        self.wall_s += wall_s

    def share(self, core: str) -> float | None:
        """How busy the ``web`` or ``load`` core was over the rounds (0-1; None
        unpinned or before any round)."""
        if self.cores is None or not self.wall_s:
            return None
        return self.busy_s[core] / self.wall_s

    def parts_share(self) -> float | None:
        """The load parts' own CPU over the rounds, in cores (CPU s per s; None
        before any round): the load core's use less other work on it."""
        return sum(self.cpu_s.values()) / self.wall_s if self.wall_s else None

    def harness_wait(self) -> dict[str, float]:
        """Each harness part's run-queue wait over the rounds as a share of their
        wall (0-1); empty when not read."""
        if not self.wall_s:
            return {}
        return {name: s / self.wall_s for name, s in self.wait_s.items()}

    def per_request_ms(self, requests: int) -> dict[str, float]:
        """Each load part's CPU per request (ms) over ``requests`` requests."""
        return {name: s * 1000 / max(1, requests) for name, s in self.cpu_s.items()}

    def describe(self, requests: int) -> str:
        """One line: both cores' busy shares, the load parts' own use (cores) and
        their CPU per request."""
        load, web = self.share("load"), self.share("web")
        cores = (
            "unpinned"
            if load is None or web is None
            else f"load core {load:.0%} busy, web core {web:.0%}"
        )
        cores += f"; load parts {self.parts_share() or 0:.2f} core"
        parts = ", ".join(
            f"{name} {ms:.2f}" for name, ms in self.per_request_ms(requests).items()
        )
        waited = ", ".join(f"{n} {w:.0%}" for n, w in self.harness_wait().items())
        waited = f"; waited for the CPU: {waited}" if waited else ""
        return f"{cores}; load CPU per request, ms: {parts}{waited}"


def load_bound(uses: dict[str, LoadUse | None]) -> str:
    """Why a figure that compares these targets' rounds measures the load side, not
    the gateway: the targets whose load core was at least :data:`LOAD_SATURATED`
    busy while a harness part waited for the CPU at least :data:`HARNESS_WAIT_MAX`
    of the time, or whose wait was not read ("load-bound: load core 97% busy (ours,
    client waited 14%), 95% (direct)"); "" when none was (or the run was not
    pinned)."""
    said = []
    for name, use in uses.items():
        share = use.share("load") if use is not None else None
        if share is None or share < LOAD_SATURATED:
            continue
        assert use is not None
        waited = use.harness_wait()
        if not waited:
            said.append(f"{share:.0%} ({name})")
            continue
        part, most = max(waited.items(), key=lambda item: item[1])
        if most >= HARNESS_WAIT_MAX:
            said.append(f"{share:.0%} ({name}, {part} waited {most:.0%})")
    if not said:
        return ""
    return "load-bound: load core " + ", ".join(said) + " busy"


def load_said(
    shares: dict[str, float | None],
    parts: dict[str, float | None],
    waits: dict[str, dict[str, float]] | None = None,
) -> str:
    """The load core's busy share, the load processes' own use and the harness's
    run-queue wait per target, in words ("load core busy: direct 100% (load
    processes 0.34 core), ours 96% (0.88 core; client waited 2%, upstream 3%)");
    "" when unpinned (no shares)."""
    said = []
    for name, share in shares.items():
        if share is None:
            continue
        own = parts.get(name)
        inside = [] if own is None else [f"{own:.2f} core"]
        if not said and own is not None:
            inside = [f"load processes {own:.2f} core"]
        waited = (waits or {}).get(name) or {}
        if waited:
            inside.append(", ".join(f"{n} waited {w:.0%}" for n, w in waited.items()))
        tail = f" ({'; '.join(inside)})" if inside else ""
        said.append(f"{name} {share:.0%}{tail}")
    return "load core busy: " + ", ".join(said) if said else ""
