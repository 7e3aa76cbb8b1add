"""Start the product as deployed (the web server, uvicorn, + inference workers, as
processes) on the test database and test Redis, for end-to-end tests and benchmarks.

:func:`running_stack` is the usual entry point (the web server + one worker; yields the
base URL). Its parts, :func:`web_process` and :func:`worker_processes`, start and stop
the web process and workers separately: a test can start a worker after a request was
queued, a benchmark can restart the web server under running workers (cold start).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import httpx
from django.conf import settings
from django.db import connection

from inference import liveness

ROOT = Path(__file__).resolve().parent.parent
ASGI_APP = "chatsite.asgi:application"
# How long a process may take to come up (s): the embedding worker loads torch and a
# model, llama.cpp a GGUF file, on a busy 2-core machine.
START_TIMEOUT_S = 120.0
# The web server's listen backlog, as the Procfile and deploy/ set it (Twisted's default,
# 50, reset connections of a burst: 165 of 2,000 streams opened at once,
# bench/sse_fanout.py)
WEB_BACKLOG = 2048
# The web server's options as the Procfile and deploy/ give them (uvicorn on uvloop and
# httptools; bench/results/2026-12-04-frame.md), besides host, port and proxy headers.
WEB_OPTIONS = [
    "--backlog", str(WEB_BACKLOG), "--lifespan", "off", "--loop", "uvloop",
    "--http", "httptools", "--timeout-graceful-shutdown", "10",
]  # fmt: skip
EMBEDDING_ENGINES = ("sentence-transformers",)


def free_port() -> int:
    """A free TCP port on loopback."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_env() -> dict[str, str]:
    """Environment that points processes at the test database and test Redis database."""
    db = connection.settings_dict
    return {
        "DJANGO_SETTINGS_MODULE": "chatsite.settings.test",
        "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
        "TEST_REDIS_URL": settings.REDIS_URL,
    }


def stack_env(env: dict[str, str] | None = None, *, for_tests: bool = True) -> dict:
    """The environment of the stack's processes: this one's, the test database and
    Redis with ``for_tests`` (else the environment's own settings), offline model hubs,
    static files served by the web process (DEBUG off, as under `make run`), and ``env`` on
    top."""
    return {
        **os.environ,
        **(test_env() if for_tests else {}),
        "HF_HUB_OFFLINE": "1",
        "PYTHONUNBUFFERED": "1",
        "DJANGO_SERVE_STATIC": "1",  # by the ASGI static handler, as under make run
        **(env or {}),
    }


@dataclass
class Process:
    """A started process and the file that collects its stderr (read on failure)."""

    popen: subprocess.Popen
    what: str
    stderr: IO[bytes] = field(repr=False)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def check(self) -> None:
        """Raise RuntimeError (with the tail of its stderr) if the process has exited."""
        if self.popen.poll() is not None:
            raise RuntimeError(
                f"{self.what} exited with {self.popen.returncode}:\n{self.stderr_tail()}"
            )

    def stderr_tail(self, chars: int = 3000) -> str:
        self.stderr.flush()
        self.stderr.seek(0)
        return self.stderr.read().decode(errors="replace")[-chars:]


def process_start(argv: Sequence[str | Path], env: dict, what: str) -> Process:
    """Start ``argv`` in the repository root with ``env``; its stderr is kept for
    :meth:`Process.stderr_tail`, its stdout dropped. ``what`` names it in errors."""
    stderr = tempfile.TemporaryFile()
    popen = subprocess.Popen(
        [str(a) for a in argv],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=stderr,
    )
    return Process(popen=popen, what=what, stderr=stderr)


def processes_stop(processes: Sequence[Process]) -> None:
    """SIGTERM all (workers drain), then wait up to 20 s each; kill what is left."""
    for p in processes:
        if p.popen.poll() is None:
            p.popen.send_signal(signal.SIGTERM)
    for p in processes:
        try:
            p.popen.wait(timeout=20)
        except subprocess.TimeoutExpired:
            p.popen.kill()
            p.popen.wait()
        p.stderr.close()


def _worker_pool(args: Sequence[str]) -> str:
    """The pool a ``run_inference_worker`` argument list serves (as the command picks it)."""
    if "--pool" in args:
        return args[list(args).index("--pool") + 1]
    engine = args[list(args).index("--engine") + 1] if "--engine" in args else ""
    if engine in EMBEDDING_ENGINES or (
        "--kind" in args and args[list(args).index("--kind") + 1] == "embedding"
    ):
        return settings.EMBEDDING_POOL
    return settings.INFERENCE_DEFAULT_POOL


@dataclass
class Web:
    """A running web server: ``base`` URL and its process (``process.pid`` for /proc)."""

    base: str
    process: Process


@contextmanager
def web_process(
    env: dict, *, app: str = ASGI_APP, server_args: Sequence[str] = ()
) -> Iterator[Web]:
    """Run :func:`web_argv` on a free port with ``env`` (see :func:`stack_env`);
    yield it once ``/login/`` answers. Raises RuntimeError if it does not come up
    within START_TIMEOUT_S seconds. Stopped with SIGTERM on exit."""
    port = free_port()
    web = process_start(web_argv(port, app=app, server_args=server_args), env, "web")
    base = f"http://127.0.0.1:{port}"
    try:
        web_wait(base, web)
        yield Web(base=base, process=web)
    finally:
        processes_stop([web])


def web_argv(
    port: int, *, app: str = ASGI_APP, server_args: Sequence[str] = ()
) -> list[str]:
    """The deployed web server's command line on 127.0.0.1:``port``: ``uvicorn
    [WEB_OPTIONS] [server_args] <app>``, proxy headers off unless ``server_args``
    turn them on (as the Procfile has them)."""
    uvicorn = Path(sys.executable).parent / "uvicorn"
    proxy = [] if "--proxy-headers" in server_args else ["--no-proxy-headers"]
    argv = [str(uvicorn), "--host", "127.0.0.1", "--port", str(port), *WEB_OPTIONS]
    return [*argv, *proxy, *server_args, app]


def web_wait(base: str, web: Process, timeout_s: float = START_TIMEOUT_S) -> None:
    """Wait until the web server at ``base`` answers ``GET /login/``."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            httpx.get(base + "/login/", timeout=1)
            return
        except httpx.HTTPError:
            web.check()
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"the web server did not start in {timeout_s:.0f} s:\n{web.stderr_tail()}"
                ) from None
            time.sleep(0.1)


def _workers_start(commands: Sequence[Sequence[str]], env: dict) -> list[Process]:
    return [
        process_start(
            [sys.executable, "manage.py", "run_inference_worker", *args],
            env,
            f"run_inference_worker {' '.join(args)}",
        )
        for args in commands
    ]


@contextmanager
def worker_processes(
    commands: Sequence[Sequence[str]], env: dict, *, wait: bool = True
) -> Iterator[list[Process]]:
    """Run ``manage.py run_inference_worker <args>`` for each of ``commands``; yield the
    processes once each one's pool has a live worker (the gateway admits a request only
    to a served pool, issue #4), or at once without ``wait`` (the caller waits with
    :func:`workers_wait`). Stopped with SIGTERM (drain) on exit."""
    procs = _workers_start(commands, env)
    try:
        if wait:
            workers_wait(procs, [_worker_pool(args) for args in commands])
        yield procs
    finally:
        processes_stop(procs)


def workers_wait(
    procs: Sequence[Process], pools: Sequence[str], timeout_s: float = START_TIMEOUT_S
) -> None:
    """Wait until every pool of ``pools`` has a live worker (a heartbeat in Redis)."""
    deadline = time.monotonic() + timeout_s
    for proc, pool in zip(procs, pools, strict=True):
        while liveness.workers_live(pool=pool) == 0:
            proc.check()
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"{proc.what}: no live worker on pool {pool!r} after {timeout_s:.0f} s:"
                    f"\n{proc.stderr_tail()}"
                )
            time.sleep(0.1)


@dataclass
class Stack:
    """A running stack: the web process and the workers."""

    web: Web
    workers: list[Process]

    @property
    def base(self) -> str:
        return self.web.base


@contextmanager
def running_processes(
    worker_args: list[str],
    env: dict[str, str] | None = None,
    *,
    for_tests: bool = True,
    extra_workers: Sequence[Sequence[str]] = (),
    app: str = ASGI_APP,
) -> Iterator[Stack]:
    """Run the web server (``app``), ``run_inference_worker <worker_args>`` and one more worker
    per ``extra_workers`` entry (e.g. an embedding worker:
    ``["--engine", "sentence-transformers"]``); yield the :class:`Stack`.

    ``for_tests`` and ``env`` as in :func:`stack_env`. The processes start together
    (their start-up overlaps); all are stopped with SIGTERM on exit.
    """
    full_env = stack_env(env, for_tests=for_tests)
    with ExitStack() as stack:
        # Start the workers first (they take longest to load), wait for them last.
        commands = [list(worker_args), *map(list, extra_workers)]
        procs = _workers_start(commands, full_env)
        stack.callback(processes_stop, procs)
        web = stack.enter_context(web_process(full_env, app=app))
        workers_wait(procs, [_worker_pool(args) for args in commands])
        yield Stack(web=web, workers=procs)


@contextmanager
def running_stack(
    worker_args: list[str],
    env: dict[str, str] | None = None,
    *,
    for_tests: bool = True,
    extra_workers: Sequence[Sequence[str]] = (),
) -> Iterator[str]:
    """Run the web server and ``manage.py run_inference_worker <worker_args>`` (and
    ``extra_workers``, see :func:`running_processes`); yield the base URL.

    With ``for_tests`` the processes use the test database (it must be committed:
    transactional tests) and the test Redis database; otherwise the settings of the
    environment (dev services). ``env`` adds variables. Stopped with SIGTERM on exit.
    """
    with running_processes(
        worker_args, env, for_tests=for_tests, extra_workers=extra_workers
    ) as stack:
        yield stack.base
