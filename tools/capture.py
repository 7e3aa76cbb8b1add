"""Feed a child process its stdin and collect its stdout and stderr under a byte
cap and a deadline (tools/sandbox.py), without ever holding more than the cap.

``subprocess.communicate`` keeps everything a program prints: a sandboxed loop
printing for ten seconds would fill the launcher's memory. Here each stream keeps its
first ``keep_bytes`` and only counts the rest; at the deadline the child's process
group is killed with SIGKILL and what is still in the pipes is drained for at most
:data:`DRAIN_S` seconds.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
import time
from dataclasses import dataclass, field

# How long the pipes are read after the kill, s: the namespace's processes die within
# milliseconds; this only bounds a pipe some process still holds.
DRAIN_S = 2.0
CHUNK = 65536


@dataclass
class Stream:
    """The first ``keep`` bytes a pipe carried and how many more came after them."""

    keep: int
    data: bytearray = field(default_factory=bytearray)
    dropped: int = 0

    def add(self, chunk: bytes) -> None:
        """Keep what fits under the cap of ``chunk``; count the rest."""
        room = max(0, self.keep - len(self.data))
        self.data += chunk[:room]
        self.dropped += max(0, len(chunk) - room)


@dataclass
class Collected:
    """What a child left: its streams, its return code (None when it never ended
    before the drain gave up) and whether the deadline killed it."""

    stdout: Stream
    stderr: Stream
    returncode: int | None
    timed_out: bool


def group_kill(pid: int) -> None:
    """Send SIGKILL to the process group ``pid`` leads (gone already: nothing)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def process_collect(
    proc: subprocess.Popen[bytes], *, stdin: bytes, keep_bytes: int, wall_s: float
) -> Collected:
    """Write ``stdin`` to ``proc`` (then close it), read its stdout and stderr (each
    capped at ``keep_bytes``) until both end, and kill its process group (``proc``
    must lead one: ``start_new_session=True``) if that takes over ``wall_s`` seconds.
    """
    assert proc.stdin and proc.stdout and proc.stderr
    out, err = Stream(keep_bytes), Stream(keep_bytes)
    sel = selectors.DefaultSelector()
    pending = memoryview(stdin)
    for pipe in (proc.stdin, proc.stdout, proc.stderr):
        os.set_blocking(pipe.fileno(), False)
    if pending:
        sel.register(proc.stdin, selectors.EVENT_WRITE)
    else:
        proc.stdin.close()
    sel.register(proc.stdout, selectors.EVENT_READ, out)
    sel.register(proc.stderr, selectors.EVENT_READ, err)
    deadline = time.monotonic() + wall_s
    timed_out = False
    try:
        while sel.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                if timed_out:
                    break  # the drain after the kill is over
                timed_out = True
                group_kill(proc.pid)
                deadline = time.monotonic() + DRAIN_S
                continue
            for key, _ in sel.select(left):
                if key.fileobj is proc.stdin:
                    try:
                        sent = os.write(key.fd, pending[:CHUNK])
                    except BrokenPipeError:
                        sent = len(pending)  # the program is gone; it never read it
                    pending = pending[sent:]
                    if not pending:
                        sel.unregister(proc.stdin)
                        proc.stdin.close()
                    continue
                chunk = os.read(key.fd, CHUNK)
                if chunk:
                    key.data.add(chunk)
                else:
                    sel.unregister(key.fileobj)
    finally:
        sel.close()
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            pipe.close()
    if not timed_out:
        # Both pipes ended (or were closed by the program) before the deadline: the
        # program still has what is left of it.
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            timed_out = True
            group_kill(proc.pid)
    try:
        returncode: int | None = proc.wait(timeout=DRAIN_S)
    except subprocess.TimeoutExpired:
        group_kill(proc.pid)
        returncode = None
    return Collected(out, err, returncode, timed_out)
