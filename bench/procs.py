"""Processes a benchmark starts itself (servers, workers) and waits for.

The scripts that start their processes with ``tests/stack.py`` get its waits; these
are for the ones that run commands of their own (an upstream server, LiteLLM, workers
with options tests/stack.py does not take).
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path


def free_port() -> int:
    """Return a TCP port on loopback that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn(
    argv: Sequence[str | Path], *, cwd: Path, env: dict[str, str], stderr: bool = False
) -> subprocess.Popen:
    """Start ``argv`` in ``cwd`` with ``env``; its output goes nowhere (``stderr``:
    keep its error output on this process's)."""
    return subprocess.Popen(
        [str(part) for part in argv],
        cwd=cwd,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=None if stderr else subprocess.DEVNULL,
    )


def processes_stop(procs: Iterable[subprocess.Popen], timeout_s: float = 20) -> None:
    """Send SIGTERM to every process, then wait up to ``timeout_s`` seconds for each
    and kill the ones still running."""
    procs = list(procs)
    for proc in procs:
        proc.terminate()
    for proc in procs:
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()


def http_wait(
    url: str, procs: Sequence[subprocess.Popen], timeout_s: float = 120
) -> None:
    """Wait until ``url`` answers (any status).

    Raises RuntimeError after ``timeout_s`` seconds, or as soon as one of ``procs``
    has exited (a server that failed to start).
    """
    import httpx

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            httpx.get(url, timeout=2)
            return
        except httpx.HTTPError:
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                raise RuntimeError(f"{url} did not come up") from None
            time.sleep(0.3)


def workers_wait(
    pools: Iterable[str],
    procs: Sequence[subprocess.Popen] = (),
    timeout_s: float = 60,
    poll_s: float = 0.3,
) -> None:
    """Wait until every pool in ``pools`` has a live worker (its heartbeat in Redis).

    Raises RuntimeError after ``timeout_s`` seconds, or as soon as one of ``procs``
    (the worker processes) has exited.
    """
    from inference import liveness

    deadline = time.monotonic() + timeout_s
    for pool in pools:
        while liveness.workers_live(pool=pool) == 0:
            if any(p.poll() is not None for p in procs):
                raise RuntimeError("a worker exited during start-up")
            if time.monotonic() > deadline:
                raise RuntimeError(f"no worker on {pool} after {timeout_s:g} s")
            time.sleep(poll_s)


def profiled(argv: Sequence[str | Path], out: Path | str | None) -> list[str]:
    """Return ``argv`` run under cProfile, its profile written to ``out`` when the
    process exits (``out`` None: ``argv`` as it is). A ``python script ...`` command
    profiles the script. Read a profile with ``python -m pstats out``."""
    command = [str(part) for part in argv]
    if out is None:
        return command
    if command[0] == sys.executable:
        command = command[1:]
    return [sys.executable, "-m", "cProfile", "-o", str(out), *command]
