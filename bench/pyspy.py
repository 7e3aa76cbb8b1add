"""Sample a running process with py-spy (pinned in requirements.txt) and summarise
where its CPU went: ``with py_spy(pid, path): ...`` records while the block runs
(``py-spy record --gil --format raw``: one line per distinct stack,
``frame;frame;... N``, only the thread holding the GIL: Python's CPU, not its waits), then :func:`collapsed_summary` prints the functions by
inclusive and by own samples.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def py_spy_path() -> str | None:
    """The py-spy executable next to this interpreter, else on PATH, else None."""
    local = Path(sys.executable).parent / "py-spy"
    return str(local) if local.exists() else shutil.which("py-spy")


@contextmanager
def py_spy(pid: int, out: Path, *, rate_hz: int = 500) -> Iterator[None]:
    """Record ``pid`` with py-spy at ``rate_hz`` samples/s (non-blocking: the process
    is not paused) while the block runs; the collapsed stacks go to ``out``. Raises
    RuntimeError when py-spy is not installed."""
    exe = py_spy_path()
    if exe is None:
        raise RuntimeError("py-spy is not installed (requirements.txt pins it)")
    # --gil: only the thread holding the GIL is sampled, so waits on PostgreSQL,
    # Redis and the event loop's select (GIL released) are left out: Python's CPU
    argv = [exe, "record", "-p", str(pid), "-r", str(rate_hz), "--nonblocking"]
    argv += ["--gil", "-f", "raw", "-o", str(out)]
    spy = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    time.sleep(1.0)  # attached before the work starts
    try:
        yield
    finally:
        spy.send_signal(signal.SIGINT)
        try:
            spy.wait(timeout=30)
        except subprocess.TimeoutExpired:
            spy.kill()
            spy.wait()


def _frame_name(frame: str) -> str:
    """``func (path/to/module.py:123)`` -> ``func (module.py)``; a thread label as is."""
    if " (" not in frame:
        return frame
    func, where = frame.split(" (", 1)
    path = where.rstrip(")").rsplit(":", 1)[0]
    marker = "site-packages/"
    if marker in path:
        path = path.split(marker, 1)[1]
    else:
        path = "/".join(path.split("/")[-2:])
    return f"{func} ({path})"


def collapsed_summary(path: Path, *, top: int = 30, per: int = 1) -> str:
    """Return a text table of the functions in py-spy's collapsed stacks at ``path``:
    share of all samples inclusive (on the stack) and own (the leaf), ``top`` of
    each; ``per``: the number of units (turns) the samples cover, for the
    samples-per-unit column."""
    inclusive: Counter[str] = Counter()
    own: Counter[str] = Counter()
    total = 0
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        frames = [_frame_name(f) for f in stack.split(";")]
        frames = [f for f in frames if not f.startswith(("thread ", "process "))]
        if not frames:
            continue
        total += n
        for name in set(frames):
            inclusive[name] += n
        own[frames[-1]] += n
    lines = [f"{total} samples ({total / max(per, 1):.1f} per turn)"]
    for title, counts in (("inclusive", inclusive), ("own", own)):
        lines.append(f"  top {top} by {title} samples:")
        for name, n in counts.most_common(top):
            lines.append(f"    {100 * n / max(total, 1):5.1f}%  {name}")
    return "\n".join(lines)
