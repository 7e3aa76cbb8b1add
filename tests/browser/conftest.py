"""Shared fixtures of the browser tests: a live stack (uvicorn, a scripted inference
worker), kept from one test of a module to the next while they ask for the same one,
and a signed-in Chromium page driven by Playwright: one Playwright driver and one
Chromium for the whole package, a fresh browser context (cookies, storage,
permissions) for each test.

Skipped where Chromium is not installed (`make test` installs it when run as root).
A test module sets ``pytestmark = BROWSER_MARKS``.
"""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field

import pytest

from inference import liveness
from inference.connections import redis_sync
from tests.stack import (
    ROOT,
    Stack,
    Web,
    _worker_pool,
    stack_env,
    web_process,
    worker_processes,
    workers_wait,
)

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
BROWSER_MARKS = [
    pytest.mark.django_db(transaction=True),
    # One retry (pytest-rerunfailures), for browser tests only: a whole stack and a
    # Chromium on two cores, where an answer now and then did not finish within the
    # page's 20 s in CI but did in every rerun here. The first try's report, with the
    # web's and the worker's stderr (``site``), stays in the output as a rerun.
    pytest.mark.flaky(reruns=1),
    pytest.mark.slow,
    pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed"),
]
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
]
SHOTS = ROOT / ".var" / "screenshots"
ANSWER = "Here is **bold** text and `code`. "


@dataclass
class BrowserLog:
    """What the browser did: every request's URL and the console's CSP violations."""

    requests: list[str] = field(default_factory=list)
    csp_violations: list[str] = field(default_factory=list)


@pytest.fixture
def script_text():
    """The scripted engine's answer (repeated up to CHAT_MAX_TOKENS); a test may
    parametrize it."""
    return ANSWER


@pytest.fixture
def site_env():
    """Extra environment of the site's processes; a test may parametrize it."""
    return {}


@pytest.fixture
def worker_args():
    """Extra arguments of the site's inference worker (later ones win, e.g.
    ``["--concurrency", "1"]``); a test may parametrize it."""
    return []


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """Keep each phase's report on the test item (``item.rep_call``) so that a fixture
    can tell in its teardown whether the test failed."""
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report


class _Stacks:
    """The live stack of a module's browser tests, kept from one test to the next
    while they ask for the same script, environment and worker arguments (starting
    the web process and a worker costs seconds of both cores; the tests' database and Redis are
    emptied between tests anyway). A test that asks for other worker arguments (a
    script, a delay) with the same environment gets a new worker beside the running
    web process; another environment, a test that fails, or a process gone makes the
    next test start a fresh stack."""

    def __init__(self) -> None:
        self.key: tuple | None = None
        self.stack: Stack | None = None
        self.pools: list[str] = []
        self._web_key: tuple | None = None
        self._web: Web | None = None
        self._web_exit = ExitStack()
        self._worker_exit = ExitStack()

    def get(self, key: tuple, args: list[str], env: dict[str, str]) -> Stack:
        """The running stack for ``key`` (``(args, env)`` as tuples), started if
        another runs or none does: the web process is kept when only ``args``
        differ and it is alive."""
        if key == self.key and self._alive():
            assert self.stack is not None
            return self.stack
        web_key = key[1:]
        web_alive = self._web is not None and self._web.process.popen.poll() is None
        if web_key != self._web_key or not web_alive:
            self.close()
            full_env = stack_env(env)
            # the worker starts first (it takes longest to load), waited for last
            workers = self._worker_exit.enter_context(
                worker_processes([args], full_env, wait=False)
            )
            self._web = self._web_exit.enter_context(web_process(full_env))
            self._web_key = web_key
        else:
            self._worker_close()
            workers = self._worker_exit.enter_context(
                worker_processes([args], stack_env(env), wait=False)
            )
        self.pools = [_worker_pool(args)]
        assert self._web is not None
        self.stack = Stack(web=self._web, workers=workers)
        self.key = key
        try:
            workers_wait(workers, self.pools)
        except BaseException:
            self.close()
            raise
        return self.stack

    def _alive(self) -> bool:
        return self.stack is not None and all(
            p.popen.poll() is None
            for p in [self.stack.web.process, *self.stack.workers]
        )

    def ready(self, timeout_s: float = 30.0) -> None:
        """Wait until the worker beats again: each test empties Redis, heartbeats
        included (the stack's worker beats every HEARTBEAT_S)."""
        deadline = time.monotonic() + timeout_s
        assert self.stack is not None
        for pool, proc in zip(self.pools, self.stack.workers, strict=False):
            while liveness.workers_live(pool=pool) == 0:
                proc.check()
                if time.monotonic() > deadline:
                    raise RuntimeError(f"no live worker on {pool!r} after the flush")
                time.sleep(0.02)

    def _worker_close(self) -> None:
        self._worker_exit.close()
        self._worker_exit = ExitStack()
        self.stack, self.key, self.pools = None, None, []

    def close(self) -> None:
        """Stop the running stack, if any (its web process, then its worker)."""
        self._web_exit.close()
        self._web_exit = ExitStack()
        self._web, self._web_key = None, None
        self._worker_close()


# The kept stack's worker beats this often (s), so it is visible again a moment
# after a test's Redis flush.
HEARTBEAT_S = "0.2"


@pytest.fixture(autouse=True)
def _clean_redis() -> Iterator[None]:
    """Each browser test starts with an empty private Redis database (db 15), but for
    the job queues a kept stack's worker reads: their entries are trimmed and the
    streams kept, with their consumer groups (a worker blocked reading a stream that
    vanishes gets UNBLOCKED from Redis and stops). Replaces tests/conftest.py's."""
    client = redis_sync()
    for key in client.scan_iter(count=1000):
        if client.type(key) in (b"stream", "stream") and client.xinfo_groups(key):
            client.xtrim(key, maxlen=0, approximate=False)
        else:
            client.delete(key)
    yield


@pytest.fixture(scope="module")
def _stacks(django_db_setup) -> Iterator[_Stacks]:
    """The module's kept stack (see :class:`_Stacks`), stopped at the module's end."""
    stacks = _Stacks()
    yield stacks
    stacks.close()


@pytest.fixture
def site(request, user, script_text, site_env, worker_args, _stacks):
    """The live stack's base URL. When the test fails, the tails of the web's and the
    worker's stderr are printed (a browser timeout alone does not say which side
    stalled) and the stack is stopped (the next test starts a fresh one)."""
    args = ["--pool", "default", "--engine", "scripted", "--delay-ms", "40"]
    args += ["--script-text", script_text, "--cycle", *worker_args]
    env = {"CHAT_MAX_TOKENS": "40", "INFERENCE_HEARTBEAT_S": HEARTBEAT_S, **site_env}
    key = (tuple(args), tuple(sorted(env.items())))
    stack = _stacks.get(key, args, env)
    try:
        _stacks.ready()
    except Exception:
        _stacks.close()  # the next test (or this one's rerun) starts a fresh stack
        raise
    yield stack.base
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        for proc in [stack.web.process, *stack.workers]:
            print(f"--- stderr of {proc.what} ---\n{proc.stderr_tail()}")
        _stacks.close()


@pytest.fixture
def browser_log():
    return BrowserLog()


class _Chromium:
    """The package's one Playwright driver and Chromium, started on first use and
    again if it went away (a crash); each test gets its own context of it.

    Playwright's sync API leaves its event loop set as the thread's running loop
    after every call (a "running" loop the test's ORM and ``async_to_sync`` calls
    would refuse to run under). A test used to start and stop its own driver, which
    unset it; now :meth:`park` unsets it between tests, so that the next test's
    fixtures run without one, and :meth:`resume` sets it again before Playwright is
    used: the same state as before for the fixtures and the test.
    """

    def __init__(self) -> None:
        self._playwright = None
        self._browser = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def resume(self):
        """The running Chromium (a Playwright ``Browser``), started if none is."""
        if self._browser is not None and self._browser.is_connected():
            asyncio._set_running_loop(self._loop)
            return self._browser
        self.close()
        from playwright.sync_api import sync_playwright

        self._playwright = sync_playwright().start()
        self._loop = asyncio.get_running_loop()
        self._browser = self._playwright.chromium.launch(
            executable_path=CHROMIUM, args=CHROMIUM_ARGS
        )
        return self._browser

    def park(self) -> None:
        """Unset Playwright's loop as the running one until the next :meth:`resume`."""
        asyncio._set_running_loop(None)

    def close(self) -> None:
        """Stop Chromium and the driver, if started (the loop is unset after)."""
        if self._playwright is None:
            return
        asyncio._set_running_loop(self._loop)
        try:
            if self._browser is not None and self._browser.is_connected():
                self._browser.close()
        finally:
            self._playwright.stop()
            self._playwright, self._browser, self._loop = None, None, None
            asyncio._set_running_loop(None)


@pytest.fixture(scope="package")
def _chromium() -> Iterator[_Chromium]:
    """The package's Chromium (see :class:`_Chromium`), stopped at its end."""
    chromium = _Chromium()
    yield chromium
    chromium.close()


@pytest.fixture
def page(request, site, browser_log, monkeypatch, _chromium):
    """A signed-in page in a fresh context of the package's Chromium (alice's
    session; 20 s timeout; requests and CSP violations go to ``browser_log``). A
    test that fails stops that Chromium: its rerun, or the next test, starts anew."""
    # Playwright's sync API runs an event loop in this thread; the ORM calls of the
    # assertions are plain sync calls, not async code.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    SHOTS.mkdir(parents=True, exist_ok=True)
    context = None
    try:
        context = _chromium.resume().new_context()
        page = context.new_page()
        page.set_default_timeout(20_000)
        context.on("request", lambda r: browser_log.requests.append(r.url))
        page.on(
            "console",
            lambda m: (
                browser_log.csp_violations.append(f"{page.url}: {m.text}")
                if "Content Security Policy" in m.text
                else None
            ),
        )
        page.goto(site + "/")
        page.fill("input[name=username]", "alice")
        page.fill("input[name=password]", "pw-alice-123")
        page.click("button[type=submit]")
        page.wait_for_selector("#composer")
        # the page's scripts (at the end of the body) have run: #composer is there as
        # soon as it is parsed, and a click before chat-ui.js binds does nothing
        page.wait_for_load_state("load")
        yield page
    finally:
        report = getattr(request.node, "rep_call", None)
        try:
            if report is None or report.failed:
                _chromium.close()
            elif context is not None:
                context.close()
        finally:
            _chromium.park()


def last_answer(page):
    """The newest assistant message of the thread (a Playwright locator)."""
    return page.locator("article.msg-assistant").last
