"""HAProxy in front of daphne processes, for tests and benchmarks: the shipped
deploy/haproxy.cfg rendered for loopback ports (scripts/haproxy_config.py), run in
the foreground, stopped on exit.

:func:`haproxy_process` yields a :class:`Proxy` once every backend is up; its
:meth:`Proxy.servers` reads the state HAProxy keeps of each backend (stats CSV).
"""

from __future__ import annotations

import csv
import os
import shutil
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from scripts.haproxy_config import haproxy_config_render
from tests.stack import Process, _start, _stop, free_port

# /usr/sbin is not on every user's PATH
HAPROXY = shutil.which("haproxy") or shutil.which("haproxy", path="/usr/sbin")
# The backend of deploy/haproxy.cfg that holds the daphne servers.
BACKEND = "daphne"


@dataclass
class Proxy:
    """A running HAProxy: ``base`` URL, ``stats`` URL and its process."""

    base: str
    stats: str
    process: Process

    def servers(self) -> dict[str, dict[str, str]]:
        """Each daphne server's row of the stats CSV by name (``web1``, ...): among
        its columns ``status`` (``UP``, ``DOWN``, ``UP 1/2``...) and ``scur`` (open
        sessions)."""
        text = httpx.get(self.stats + "/;csv", timeout=5).text
        rows = csv.DictReader(text.removeprefix("# ").splitlines())
        return {
            row["svname"]: row
            for row in rows
            if row["pxname"] == BACKEND and row["svname"] not in ("FRONTEND", "BACKEND")
        }

    def wait(self, predicate, timeout_s: float = 30.0) -> dict[str, dict[str, str]]:
        """Poll :meth:`servers` until ``predicate(servers)``; return the servers.
        Raises RuntimeError after ``timeout_s`` seconds (or if HAProxy exited)."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                servers = self.servers()
            except httpx.HTTPError:
                servers = {}
            if servers and predicate(servers):
                return servers
            self.process.check()
            if time.monotonic() > deadline:
                raise RuntimeError(f"HAProxy servers never matched: {servers}")
            time.sleep(0.05)


def all_up(servers: dict[str, dict[str, str]]) -> bool:
    """True when every server's last check passed."""
    return all(row["status"] == "UP" for row in servers.values())


@contextmanager
def haproxy_process(backends: Sequence[str]) -> Iterator[Proxy]:
    """Run HAProxy (deploy/haproxy.cfg) on free loopback ports in front of
    ``backends`` (``host:port`` each); yield it once all of them are UP. Raises
    RuntimeError if haproxy is not installed or does not come up."""
    if HAPROXY is None:
        raise RuntimeError("haproxy is not installed (make test installs it as root)")
    port, stats_port = free_port(), free_port()
    config = haproxy_config_render(
        listen=f"127.0.0.1:{port}",
        stats_listen=f"127.0.0.1:{stats_port}",
        backends=backends,
    )
    with tempfile.TemporaryDirectory(prefix="haproxy-") as folder:
        path = Path(folder) / "haproxy.cfg"
        path.write_text(config)
        # -db: foreground, no daemon; the configuration's log goes to our stdout
        process = _start([HAPROXY, "-db", "-f", path], dict(os.environ), "haproxy")
        proxy = Proxy(
            base=f"http://127.0.0.1:{port}",
            stats=f"http://127.0.0.1:{stats_port}",
            process=process,
        )
        try:
            proxy.wait(all_up)
            yield proxy
        finally:
            _stop([process])
