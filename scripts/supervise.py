"""Run a command and restart it if it dies; used by the Procfile for the inference worker.

    python scripts/supervise.py CMD [ARG ...]

honcho stops every process when one of them exits, so without this a crashed worker
(OOM kill, segfault in a native library) would take the whole `make run` down. A child
that exits 0 (a graceful drain) is not restarted; SIGTERM/SIGINT are forwarded to the
child and end the supervisor once the child has exited. Restarts wait RESTART_DELAY_S.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time

RESTART_DELAY_S = 2.0


def supervise(cmd: list[str]) -> int:
    """Run ``cmd`` until it exits 0 or we are told to stop; return its exit status."""
    stopping = False
    child: subprocess.Popen[bytes] | None = None

    def forward(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True
        if child is not None and child.poll() is None:
            child.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    while True:
        child = subprocess.Popen(cmd)
        rc = child.wait()
        if stopping or rc == 0:
            return rc
        print(
            f"supervise: {' '.join(cmd[:4])} exited with status {rc}; "
            f"restarting in {RESTART_DELAY_S:.0f} s",
            file=sys.stderr,
            flush=True,
        )
        deadline = time.monotonic() + RESTART_DELAY_S
        while time.monotonic() < deadline and not stopping:
            time.sleep(0.1)
        if stopping:
            return rc


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: supervise.py CMD [ARG ...]")
    sys.exit(supervise(sys.argv[1:]))
