"""The web process of ``bench/sse_fanout.py``: uvicorn (as deployed: the Procfile),
daphne, or daphne on uvloop's event loop (:mod:`bench.daphne_uvloop`), serving the
same ASGI application, optionally under cProfile."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SERVERS = ("daphne", "daphne-uvloop", "uvicorn")


@dataclass
class WebServer:
    """A running web process: its ``base`` URL and :class:`tests.stack.Process`."""

    base: str
    process: Any

    def warnings(self) -> dict[str, int]:
        """Its WARNING/ERROR log lines so far, counted (digits folded, cut at 200
        characters): why a stream ended with an error frame, in the web's words."""
        counts: dict[str, int] = {}
        err = self.process.stderr
        err.flush()
        err.seek(0)
        for line in err.read().decode(errors="replace").splitlines():
            if "WARNING" in line or "ERROR" in line or "Error" in line:
                folded = re.sub(r"\d+", "N", line)[:200]
                counts[folded] = counts.get(folded, 0) + 1
        return counts


def server_argv(server: str, port: int) -> list[str]:
    """The command line of ``server`` (one of SERVERS) on 127.0.0.1:``port``,
    with the deployed listen backlog."""
    from tests.stack import ASGI_APP, WEB_BACKLOG

    bin_dir = Path(sys.executable).parent
    if server == "daphne":
        endpoint = f"tcp:port={port}:interface=127.0.0.1:backlog={WEB_BACKLOG}"
        return [str(bin_dir / "daphne"), "-e", endpoint, ASGI_APP]
    if server == "daphne-uvloop":
        endpoint = f"tcp:port={port}:interface=127.0.0.1:backlog={WEB_BACKLOG}"
        return [sys.executable, "-m", "bench.daphne_uvloop", "-e", endpoint, ASGI_APP]
    if server == "uvicorn":
        return [
            str(bin_dir / "uvicorn"), "--host", "127.0.0.1", "--port", str(port),
            "--backlog", str(WEB_BACKLOG), "--no-access-log", "--lifespan", "off",
            ASGI_APP,
        ]  # fmt: skip
    raise ValueError(f"unknown server {server!r}: one of {SERVERS}")


@contextmanager
def web_server(env: dict, server: str, profile: str | None) -> Iterator[WebServer]:
    """Start ``server`` (under cProfile into ``profile`` when given: written when it
    exits on SIGTERM); yield it once ``/login/`` answers; stop it on exit."""
    from bench.procs import profiled
    from tests.stack import free_port, process_start, processes_stop, web_wait

    port = free_port()
    argv = server_argv(server, port)
    if profile:
        argv = profiled([sys.executable, *argv], profile)
    proc = process_start(argv, env, server)
    base = f"http://127.0.0.1:{port}"
    try:
        web_wait(base, proc)
        yield WebServer(base=base, process=proc)
    finally:
        processes_stop([proc])
