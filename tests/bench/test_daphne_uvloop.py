"""bench/daphne_uvloop.py: daphne on uvloop's event loop (a benchmark's alternative)."""

from __future__ import annotations

import subprocess
import sys

PROBE = """
from bench.daphne_uvloop import daphne_prepare
daphne_prepare()
import daphne.http_protocol, daphne.server, uvloop
from twisted.internet import reactor
print(type(daphne.server.twisted_loop).__name__, reactor._asyncioEventloop is
      daphne.server.twisted_loop, type(daphne.http_protocol.http).__name__)
try:
    daphne_prepare()
except RuntimeError as exc:
    print("again:", exc)
"""


def test_daphne_prepared_runs_twisted_on_uvloop_and_reaches_http_directly():
    """A fresh interpreter (daphne's loop is made at its import): daphne's loop is
    uvloop's, Twisted's reactor runs on it, and daphne's protocol module holds
    twisted.web.http itself, not Twisted's deprecation proxy; once daphne's loop is
    made, preparing again is refused."""
    out = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    first, again = out.stdout.splitlines()
    assert first.split() == ["Loop", "True", "module"]
    assert again == "again: daphne.server was imported before the event loop policy"
