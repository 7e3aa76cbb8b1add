"""Start the product as deployed (daphne + an inference worker, as processes) on the test
database and test Redis, for end-to-end tests."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
from django.conf import settings
from django.db import connection

from inference import client as inference_client

ROOT = Path(__file__).resolve().parent.parent


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


@contextmanager
def running_stack(
    worker_args: list[str], env: dict[str, str] | None = None, *, for_tests: bool = True
) -> Iterator[str]:
    """Run daphne and ``manage.py run_inference_worker <worker_args>``; yield the base URL.

    With ``for_tests`` both processes use the test database (it must be committed:
    transactional tests) and the test Redis database; otherwise the settings of the
    environment (dev services). ``env`` adds variables. Stopped with SIGTERM on exit.
    """
    full_env = {
        **os.environ,
        **(test_env() if for_tests else {}),
        "HF_HUB_OFFLINE": "1",
        "PYTHONUNBUFFERED": "1",
        "DJANGO_DEBUG": "1",  # static files served by the ASGI static handler
        **(env or {}),
    }
    port = free_port()
    bin_dir = Path(sys.executable).parent
    procs = [
        subprocess.Popen(
            [
                bin_dir / "daphne",
                "-b",
                "127.0.0.1",
                "-p",
                str(port),
                "chatsite.asgi:application",
            ],
            cwd=ROOT,
            env=full_env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        ),
        subprocess.Popen(
            [sys.executable, "manage.py", "run_inference_worker", *worker_args],
            cwd=ROOT,
            env=full_env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        ),
    ]
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 60
        while True:
            try:
                httpx.get(base + "/login/", timeout=1)
                break
            except httpx.HTTPError:
                if time.time() > deadline or any(p.poll() is not None for p in procs):
                    raise RuntimeError("daphne did not start") from None
                time.sleep(0.2)
        # the gateway admits a request only to a pool with a live worker (issue #4)
        pool = (
            worker_args[worker_args.index("--pool") + 1]
            if "--pool" in worker_args
            else None
        )
        while (
            inference_client.workers_live(pool=pool or settings.INFERENCE_DEFAULT_POOL)
            == 0
        ):
            if time.time() > deadline + 60 or any(p.poll() is not None for p in procs):
                raise RuntimeError("the inference worker did not start")
            time.sleep(0.2)
        yield base
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
