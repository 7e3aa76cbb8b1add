"""What a process has used, read from Linux's /proc (the benchmarks' web, worker and
Redis processes are separate processes on the same machine)."""

from __future__ import annotations

import os
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK")  # /proc/<pid>/stat counts CPU time in clock ticks


def _status(pid: int, field: str) -> int:
    """An integer field of /proc/<pid>/status (its first number; 0 if absent)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    return 0


def proc_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process (/proc/<pid>/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def proc_rss_mib(pid: int) -> float:
    """Resident set size of a process, MiB (/proc/<pid>/status VmRSS, kB)."""
    return _status(pid, "VmRSS") / 1024


def proc_peak_rss_mib(pid: int) -> float:
    """The process's highest resident set size so far, MiB (VmHWM, kB)."""
    return _status(pid, "VmHWM") / 1024


def proc_threads(pid: int) -> int:
    """Threads of a process (/proc/<pid>/status)."""
    return _status(pid, "Threads")
