"""Shared fixtures of the browser tests: a live stack (daphne, a scripted inference
worker) and a signed-in Chromium page driven by Playwright.

Skipped where Chromium is not installed (`make test` installs it when run as root).
A test module sets ``pytestmark = BROWSER_MARKS``.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field

import pytest

from tests.stack import ROOT, running_processes

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


@pytest.fixture
def site(request, user, script_text, site_env, worker_args):
    """The live stack's base URL. When the test fails, the tails of the web's and the
    worker's stderr are printed (a browser timeout alone does not say which side
    stalled)."""
    args = ["--pool", "default", "--engine", "scripted", "--delay-ms", "40"]
    args += ["--script-text", script_text, "--cycle", *worker_args]
    env = {"CHAT_MAX_TOKENS": "40", **site_env}
    with running_processes(args, env=env) as stack:
        yield stack.base
        report = getattr(request.node, "rep_call", None)
        if report is not None and report.failed:
            for proc in [stack.web.process, *stack.workers]:
                print(f"--- stderr of {proc.what} ---\n{proc.stderr_tail()}")


@pytest.fixture
def browser_log():
    return BrowserLog()


@pytest.fixture
def page(site, browser_log, monkeypatch):
    from playwright.sync_api import sync_playwright

    # Playwright's sync API runs an event loop in this thread; the ORM calls of the
    # assertions are plain sync calls, not async code.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=CHROMIUM,
            args=CHROMIUM_ARGS,
        )
        page = browser.new_page()
        page.set_default_timeout(20_000)
        page.context.on("request", lambda r: browser_log.requests.append(r.url))
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
        yield page
        browser.close()


def last_answer(page):
    """The newest assistant message of the thread (a Playwright locator)."""
    return page.locator("article.msg-assistant").last
