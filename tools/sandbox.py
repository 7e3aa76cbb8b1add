"""Run untrusted Python in a bubblewrap sandbox: the ``run_python`` tool (DESIGN §13).

:func:`python_run` starts Debian's ``/usr/bin/python3`` (not the virtualenv's) in the
sandbox that :mod:`tools.bwrap` describes (no network, a private read-only root with a
tmpfs scratch directory, an empty environment, a non-root uid, per-process resource
limits) and returns what it printed, cut to a byte cap with a note, its exit status
and whether the wall-clock limit killed it. The program is read from stdin
(``python3 -I -u -``: isolated mode ignores ``PYTHON*`` variables and user site
directories; unbuffered, so what was printed before a kill is kept). docs/tools.md
lists what the sandbox allows and refuses, and the settings.
"""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass

from tools.bwrap import (
    SANDBOX_ENV,
    Confinement,
    SandboxUnavailable,
    bwrap_command,
)
from tools.capture import Stream, process_collect

__all__ = [
    "SandboxLimits",
    "SandboxResult",
    "SandboxUnavailable",
    "python_run",
    "output_note",
]

MIB = 1 << 20
# How the launcher chain reports that it could not start the sandbox (exit status 1,
# e.g. "bwrap: No permissions to create a new namespace" where the kernel refuses user
# namespaces).
LAUNCHER_ERROR = re.compile(r"(bwrap|setpriv|prlimit): ")


@dataclass(frozen=True)
class SandboxLimits:
    """What one run may use. Seconds (``wall_s`` for the whole run, ``cpu_s`` per
    process), bytes (``memory_bytes`` of address space per process, ``file_bytes``
    per file written, ``disk_bytes`` per writable tmpfs, ``output_bytes`` kept of
    each of stdout and stderr, ``code_bytes`` of program), counts (``processes`` and
    threads of the sandbox uid, ``open_files`` per process); ``uid``/``gid`` are the
    identity a root launcher drops to. The defaults are the settings' defaults
    (chatsite/settings/tools.py)."""

    wall_s: float = 10.0
    cpu_s: int = 5
    memory_bytes: int = 256 * MIB
    processes: int = 64
    file_bytes: int = 16 * MIB
    disk_bytes: int = 64 * MIB
    open_files: int = 64
    output_bytes: int = 64 * 1024
    code_bytes: int = 256 * 1024
    uid: int = 65534
    gid: int = 65534
    python: str = "/usr/bin/python3"

    @classmethod
    def from_settings(cls) -> SandboxLimits:
        """Return the limits of the ``TOOLS_SANDBOX_*`` Django settings."""
        from django.conf import settings

        return cls(
            wall_s=settings.TOOLS_SANDBOX_WALL_S,
            cpu_s=settings.TOOLS_SANDBOX_CPU_S,
            memory_bytes=settings.TOOLS_SANDBOX_MEMORY_BYTES,
            processes=settings.TOOLS_SANDBOX_PROCESSES,
            file_bytes=settings.TOOLS_SANDBOX_FILE_BYTES,
            disk_bytes=settings.TOOLS_SANDBOX_DISK_BYTES,
            open_files=settings.TOOLS_SANDBOX_OPEN_FILES,
            output_bytes=settings.TOOLS_SANDBOX_OUTPUT_BYTES,
            code_bytes=settings.TOOLS_SANDBOX_CODE_BYTES,
            uid=settings.TOOLS_SANDBOX_UID,
            gid=settings.TOOLS_SANDBOX_GID,
            python=settings.TOOLS_SANDBOX_PYTHON,
        )


@dataclass(frozen=True)
class SandboxResult:
    """One run's outcome.

    ``stdout``/``stderr``: the text printed (UTF-8, undecodable bytes replaced), each
    cut at the limit's ``output_bytes`` and then ended by :func:`output_note`.
    ``exit_code``: the program's status as a shell reports it (128 + N when signal N
    ended it, e.g. 137 for SIGKILL, 152 for SIGXCPU); None when it never ended.
    ``timed_out``: the wall-clock limit ran out and the sandbox was killed.
    ``killed``: a signal ended it (the timeout's SIGKILL, the CPU limit's
    SIGXCPU/SIGKILL, or any other). ``wall_ms``: from start to the end, ms.
    """

    stdout: str
    stderr: str
    exit_code: int | None
    timed_out: bool
    killed: bool
    wall_ms: float

    @property
    def ok(self) -> bool:
        """Whether the program ran to its end with status 0."""
        return self.exit_code == 0 and not self.timed_out


def output_note(dropped: int) -> str:
    """Return the line that ends an output cut ``dropped`` bytes short."""
    return f"\n[output truncated: {dropped} more bytes]\n"


def stream_text(stream: Stream) -> str:
    """Return ``stream``'s kept bytes as text, with the note when some were cut."""
    text = bytes(stream.data).decode("utf-8", errors="replace")
    return text + output_note(stream.dropped) if stream.dropped else text


def python_run(
    code: str,
    *,
    limits: SandboxLimits | None = None,
    started: Callable[[int], None] | None = None,
) -> SandboxResult:
    """Run the Python program ``code`` in the sandbox and return its outcome.

    ``limits`` default to the Django settings (:meth:`SandboxLimits.from_settings`).
    ``started`` is called with the sandbox's process group id once it runs, so a
    caller in another thread can kill it (:func:`tools.capture.group_kill`).
    Raises :class:`ValueError` when ``code`` is over ``code_bytes`` (UTF-8) and
    :class:`SandboxUnavailable` when bwrap, prlimit or setpriv is missing, the uid
    is root, or the chain reports that it could not start the sandbox. What the
    code does (an exception, a kill) is in the result, not raised.
    """
    limits = limits or SandboxLimits.from_settings()
    program = code.encode("utf-8")
    if len(program) > limits.code_bytes:
        raise ValueError(
            f"the program is {len(program)} bytes; the sandbox takes at most "
            f"{limits.code_bytes}"
        )
    confine = Confinement(
        cpu_s=limits.cpu_s,
        memory_bytes=limits.memory_bytes,
        processes=limits.processes,
        file_bytes=limits.file_bytes,
        open_files=limits.open_files,
        disk_bytes=limits.disk_bytes,
        uid=limits.uid,
        gid=limits.gid,
    )
    command = bwrap_command([limits.python, "-I", "-u", "-"], confine=confine)
    began = time.monotonic()
    proc = subprocess.Popen(
        command,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=dict(SANDBOX_ENV),
        cwd="/",
        close_fds=True,
        start_new_session=True,
    )
    if started is not None:
        started(proc.pid)
    done = process_collect(
        proc, stdin=program, keep_bytes=limits.output_bytes, wall_s=limits.wall_s
    )
    wall_ms = (time.monotonic() - began) * 1000
    stderr = stream_text(done.stderr)
    if done.returncode == 1 and not done.stdout.data and LAUNCHER_ERROR.match(stderr):
        raise SandboxUnavailable(stderr.strip())
    code_ = done.returncode
    if code_ is not None and code_ < 0:  # bwrap itself was signalled
        code_ = 128 - code_
    return SandboxResult(
        stdout=stream_text(done.stdout),
        stderr=stderr,
        exit_code=code_,
        timed_out=done.timed_out,
        killed=done.timed_out or (code_ is not None and code_ > 128),
        wall_ms=wall_ms,
    )
