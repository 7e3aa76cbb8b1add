"""HAProxy or nginx in front of web processes (uvicorn, tests/stack.py), for tests
and benchmarks: the shipped deploy/haproxy.cfg or deploy/nginx.conf rendered for loopback ports
(scripts/haproxy_config.py, scripts/nginx_config.py), run in the foreground, stopped
on exit.

:func:`haproxy_process` yields a :class:`Proxy` once every backend is up; its
:meth:`Proxy.servers` reads the state HAProxy keeps of each backend (stats CSV).
:func:`nginx_process` yields an :class:`Nginx` once it answers (open-source nginx has
no such state to read: its checks are passive).
"""

from __future__ import annotations

import csv
import getpass
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
from scripts.nginx_config import nginx_config_render
from tests.stack import Process, free_port, process_start, processes_stop

# /usr/sbin is not on every user's PATH
HAPROXY = shutil.which("haproxy") or shutil.which("haproxy", path="/usr/sbin")
NGINX = shutil.which("nginx") or shutil.which("nginx", path="/usr/sbin")
# The backend of deploy/haproxy.cfg that holds the web servers.
BACKEND = "web"


@dataclass
class Proxy:
    """A running HAProxy: ``base`` URL, ``stats`` URL and its process."""

    base: str
    stats: str
    process: Process

    def servers(self) -> dict[str, dict[str, str]]:
        """Each web server's row of the stats CSV by name (``web1``, ...): among
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
        process = process_start(
            [HAPROXY, "-db", "-f", path], dict(os.environ), "haproxy"
        )
        proxy = Proxy(
            base=f"http://127.0.0.1:{port}",
            stats=f"http://127.0.0.1:{stats_port}",
            process=process,
        )
        try:
            proxy.wait(all_up)
            yield proxy
        finally:
            processes_stop([process])


@dataclass
class Nginx:
    """A running nginx: ``base`` URL, the rendered ``config`` and its process."""

    base: str
    config: str
    process: Process


def nginx_render_private(
    *, listen: str, backends: Sequence[str], folder: Path, extra: str = ""
) -> Path:
    """Write deploy/nginx.conf rendered to run as the current user with its pid, access
    log and temporary files under ``folder`` and its error log on stderr; return the
    file's path. ``extra`` is added
    to the proxied location (a test may need to see what the shipped file hides)."""
    temp = folder / "temp"
    temp.mkdir()
    config = nginx_config_render(
        listen=listen,
        backends=backends,
        user=getpass.getuser(),  # ignored, with a warning, unless run as root
        pid=str(folder / "nginx.pid"),
        error_log="stderr",
        access_log=str(folder / "access.log"),
        temp_dir=str(temp),
    )
    if extra:
        anchor = "proxy_pass http://web;"
        assert config.count(anchor) == 1
        config = config.replace(anchor, f"{anchor}\n            {extra}")
    path = folder / "nginx.conf"
    path.write_text(config)
    return path


def nginx_argv(path: Path, *more: str) -> list[str]:
    """nginx's command line for the private configuration at ``path``: its folder as
    the prefix, errors on stderr from the start (not in Debian's /var/log/nginx), no
    daemon."""
    assert NGINX is not None
    folder = path.parent
    return [
        NGINX,
        "-p",
        str(folder),
        "-e",
        "stderr",
        "-c",
        str(path),
        "-g",
        "daemon off;",
        *more,
    ]


@contextmanager
def nginx_process(backends: Sequence[str], *, extra: str = "") -> Iterator[Nginx]:
    """Run nginx (deploy/nginx.conf) on a free loopback port in front of
    ``backends`` (``host:port`` each) as the current user; yield it once it answers.
    Raises RuntimeError if nginx is not installed or does not come up."""
    if NGINX is None:
        raise RuntimeError("nginx is not installed (make test installs it as root)")
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="nginx-") as name:
        folder = Path(name)
        path = nginx_render_private(
            listen=f"127.0.0.1:{port}", backends=backends, folder=folder, extra=extra
        )
        process = process_start(nginx_argv(path), dict(os.environ), "nginx")
        proxy = Nginx(
            base=f"http://127.0.0.1:{port}", config=path.read_text(), process=process
        )
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    httpx.get(proxy.base + "/healthz", timeout=5)
                    break
                except httpx.HTTPError:
                    process.check()
                    if time.monotonic() > deadline:
                        raise RuntimeError("nginx did not come up") from None
                    time.sleep(0.05)
            yield proxy
        finally:
            processes_stop([process])
