"""Shared fixtures: real PostgreSQL + pgvector and Redis (started by `make test`),
an in-process inference worker, users and SSE helpers."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.test import Client

from inference import client as inference_client
from inference import keys, liveness, protocol
from inference.connections import redis_sync
from inference.embed_worker import EmbedWorker
from inference.engines.base import Engine
from inference.engines.scripted import ScriptedEngine
from inference.worker import Worker


@pytest.fixture(autouse=True, scope="session")
def _metrics_dir() -> Iterator[None]:
    """Remove this session's Prometheus multiprocess folder (settings/test.py) at the end."""
    yield
    folder = Path(settings.PROMETHEUS_MULTIPROC_DIR)
    if folder.name == f"prometheus-test-{os.getpid()}":
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup: Any, django_db_blocker: Any) -> Iterator[None]:
    """pytest-django's test database, with the connection pools closed before it is
    dropped (pooled connections of ASGI threads would keep it "in use")."""
    yield
    from django.db import connections

    with django_db_blocker.unblock():
        for connection in connections.all():
            if getattr(connection, "pool", None) is not None:
                connection.close_pool()


@pytest.fixture(autouse=True)
def _clean_redis() -> Iterator[None]:
    """Each test starts with an empty private Redis database (db 15)."""
    redis_sync().flushdb()
    yield


@pytest.fixture(autouse=True)
def _one_ratelimit_window(monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep each in-process test's requests in one counting window of django-ratelimit.

    The library counts in fixed windows per key (``core._get_window`` rounds the
    clock and adds a per-key offset), so two POSTs a few ms apart can straddle a
    window's end and the second starts a fresh count: a rare 201 where a test waits
    for a 429. Here every window ends one full period after the test started, so the
    library's ``time_left`` (and our refusal mark's TTL) stays about one period."""
    from django_ratelimit import core

    started = int(time.time())
    monkeypatch.setattr(core, "_get_window", lambda value, period: started + period)


@pytest.fixture
def enqueued(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Job ids enqueued on any pool (spy on the real job_enqueue)."""
    seen: list[str] = []
    original = inference_client.job_enqueue

    def spy(*, pool: str, job: protocol.Job, **options: Any) -> Any:
        seen.append(job.job_id)
        return original(pool=pool, job=job, **options)

    monkeypatch.setattr(inference_client, "job_enqueue", spy)
    return seen


# How long a test worker's read of the queue blocks (ms). A job wakes the read at once
# whatever the value; it only bounds how long :meth:`WorkerThread.stop` waits for the
# read in progress to return (the Worker's default, 500 ms, was half a second of
# every test's teardown).
TEST_WORKER_BLOCK_MS = 50


class WorkerThread:
    """Run a real :class:`Worker` on its own event loop in a background thread
    (``block_ms`` is TEST_WORKER_BLOCK_MS unless given)."""

    def __init__(
        self,
        engine: Any,
        *,
        pool: str | None = None,
        worker_class: type[Worker] = Worker,
        started: Callable[[], None] | None = None,
        **options: Any,
    ) -> None:
        self.pool = pool or settings.INFERENCE_DEFAULT_POOL
        self.engine = engine
        self.started = started  # Worker.run's: called before the first heartbeat
        options.setdefault("block_ms", TEST_WORKER_BLOCK_MS)
        self.worker = worker_class(
            pool=self.pool,
            engine=engine,
            redis_url=settings.REDIS_URL,
            heartbeat_s=0.5,
            **options,
        )
        self.loop: asyncio.AbstractEventLoop | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        async def main() -> None:
            self.loop = asyncio.get_running_loop()
            await self.worker.run(started=self.started)

        try:
            asyncio.run(main())
        except BaseException as exc:  # noqa: BLE001 - reported by stop()
            self.error = exc

    def start(self, timeout: float = 30.0) -> WorkerThread:
        """Start and wait until the worker's heartbeat is visible."""
        self.thread.start()
        deadline = time.time() + timeout
        while liveness.workers_live(pool=self.pool) == 0:
            if self.error or time.time() > deadline:
                raise RuntimeError(f"worker did not start: {self.error!r}")
            time.sleep(0.02)
        return self

    def stop(self, *, abort_running: bool = True) -> None:
        """Stop the worker (cancelling running jobs by default) and join its thread."""
        if self.loop is not None and self.thread.is_alive():
            self.loop.call_soon_threadsafe(
                lambda: self.worker.stop(abort_running=abort_running)
            )
        self.thread.join(timeout=20)
        assert not self.thread.is_alive(), "worker did not stop"
        if self.error:
            raise self.error


@pytest.fixture
def start_worker() -> Iterator[Any]:
    """Factory: ``start_worker(engine=None, **worker_options)`` -> running WorkerThread."""
    started: list[WorkerThread] = []

    def _start(engine: Engine | None = None, **options: Any) -> WorkerThread:
        handle = WorkerThread(engine or ScriptedEngine(), **options).start()
        started.append(handle)
        return handle

    yield _start
    for handle in started:
        handle.stop()


@pytest.fixture
def start_embedding_worker() -> Iterator[Any]:
    """Factory: ``start_embedding_worker(engine, **options)`` -> a running
    :class:`EmbedWorker` thread on EMBEDDING_POOL with a test engine (no torch in the
    test process: torch's OpenMP and llama.cpp's crash when both run in one process;
    the real model runs in its own process, see ``embedding_worker``)."""
    started: list[WorkerThread] = []

    def _start(engine: Any, **options: Any) -> WorkerThread:
        options.setdefault("pool", settings.EMBEDDING_POOL)
        handle = WorkerThread(engine, worker_class=EmbedWorker, **options).start()
        started.append(handle)
        return handle

    yield _start
    for handle in started:
        handle.stop()


# The real embedding model's pool in tests: its own name, so a test without the
# fixture has no embedding worker (EMBEDDING_POOL stays "embed", served by nobody).
REAL_EMBEDDING_POOL = "embed-minilm"


def _die_with_parent() -> None:
    """In the child: get SIGTERM when the test process dies, even by a crash (Linux
    PR_SET_PDEATHSIG), so no worker outlives its session and serves the next one."""
    import ctypes

    ctypes.CDLL("libc.so.6", use_errno=True).prctl(
        1, signal.SIGTERM
    )  # PR_SET_PDEATHSIG


@pytest.fixture(scope="session")
def _embedding_process(django_db_setup: Any) -> Iterator[subprocess.Popen[bytes]]:
    """One embedding worker process (all-MiniLM-L6-v2) for the whole test session, as
    deployed (``run_inference_worker --engine sentence-transformers``). It beats every
    0.2 s, so after each test's Redis flush it is visible again within a moment."""
    from tests.stack import ROOT, test_env

    env = {
        **os.environ,
        **test_env(),
        "HF_HUB_OFFLINE": "1",
        "INFERENCE_HEARTBEAT_S": "0.2",
        "INFERENCE_WORKER_TTL_S": "10",
    }
    proc = subprocess.Popen(
        [
            sys.executable,
            "manage.py",
            "run_inference_worker",
            "--engine",
            "sentence-transformers",
            "--pool",
            REAL_EMBEDDING_POOL,
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        preexec_fn=_die_with_parent,
    )
    yield proc
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()


@pytest.fixture
def embedding_worker(
    _embedding_process: subprocess.Popen[bytes], settings: Any
) -> subprocess.Popen[bytes]:
    """A live embedding worker with the real model: EMBEDDING_POOL points at it."""
    settings.EMBEDDING_POOL = REAL_EMBEDDING_POOL
    deadline = time.time() + 60
    while liveness.workers_live(pool=REAL_EMBEDDING_POOL) == 0:
        if _embedding_process.poll() is not None:
            raise RuntimeError("the embedding worker process exited")
        if time.time() > deadline:
            raise RuntimeError("the embedding worker did not start within 60 s")
        time.sleep(0.02)
    return _embedding_process


@pytest.fixture
def moderation_on(settings: Any) -> None:
    """Input moderation switched on (SAFETY_INPUT_ENABLED: on in the product, off in
    chatsite/settings/test.py): for the tests of moderation itself."""
    settings.SAFETY_INPUT_ENABLED = True


@pytest.fixture
def moderation_off(settings: Any) -> None:
    """Input moderation switched off (SAFETY_INPUT_ENABLED; already off in the test
    settings, so this states the intent and guards against an environment that turns
    it on), for tests about something else that need a live embedding worker: their
    texts must not depend on the classifier's verdicts (moderation has its own tests:
    tests/safety, tests/conversations/test_turn_moderation.py,
    openai/test_moderation.py). Without an embedding worker moderation fails open at
    once and needs no switch."""
    settings.SAFETY_INPUT_ENABLED = False


@pytest.fixture
def user(django_user_model: Any) -> Any:
    return django_user_model.objects.create_user(
        username="alice", password="pw-alice-123"
    )


@pytest.fixture
def other_user(django_user_model: Any) -> Any:
    return django_user_model.objects.create_user(
        username="mallory", password="pw-mallory-123"
    )


@pytest.fixture
def auth_client(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def make_user(username: str) -> Any:
    """Create a user (helper for tests that need several)."""
    return get_user_model().objects.create_user(
        username=username, password=f"pw-{username}-1"
    )


def fake_heartbeat(pool: str = "default", worker_id: str = "fake-worker") -> None:
    """Make ``pool`` look served (a heartbeat an hour ahead) so the gateway admits jobs
    that no real worker takes: tests of what happens before, or without, a worker."""

    redis_sync().zadd(keys.workers_key(pool), {worker_id: time.time() + 3600})


def fake_heartbeat_stop(pool: str = "default", worker_id: str = "fake-worker") -> None:
    """Remove the heartbeat of :func:`fake_heartbeat` (the worker went away)."""

    redis_sync().zrem(keys.workers_key(pool), worker_id)


@pytest.fixture
def pool_heartbeat() -> None:
    """The default pool looks served (see :func:`fake_heartbeat`)."""
    fake_heartbeat()
