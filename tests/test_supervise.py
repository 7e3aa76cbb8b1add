"""scripts/supervise.py: the Procfile's restart wrapper for the inference worker."""

import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SUPERVISE = [sys.executable, str(ROOT / "scripts" / "supervise.py")]


def test_a_crashed_child_is_restarted_and_a_clean_exit_ends_it(tmp_path):
    counter = tmp_path / "runs"
    # crashes (killed by SIGKILL) on its first run, exits 0 on its second
    child = (
        f"import os, pathlib, signal; p = pathlib.Path({str(counter)!r}); n = int(p.read_text() or 0) "
        "if p.exists() else 0; p.write_text(str(n + 1)); "
        "os.kill(os.getpid(), signal.SIGKILL) if n == 0 else None"
    )
    done = subprocess.run([*SUPERVISE, sys.executable, "-c", child], timeout=30)
    assert done.returncode == 0
    assert counter.read_text() == "2"


def test_sigterm_is_forwarded_and_stops_without_restart(tmp_path):
    marker = tmp_path / "got-term"
    child = (
        "import signal, sys, time, pathlib\n"
        "def bye(*_):\n"
        f"    pathlib.Path({str(marker)!r}).write_text('x'); sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, bye)\n"
        "time.sleep(60)\n"
    )
    proc = subprocess.Popen([*SUPERVISE, sys.executable, "-c", child])
    time.sleep(1.0)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == 0
    assert marker.exists()
