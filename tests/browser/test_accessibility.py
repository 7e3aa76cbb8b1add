"""Accessibility of every page in Chromium: axe-core finds no serious or critical
violation (all violations are printed), on the chat with a streamed answer, the
Documents, document, Memory, Settings, confirmation and error pages, an answer whose
tool steps are shown collapsed and open, and the sign-in and sign-up pages; the chat, Documents and Settings in the dark palette too.

Skipped where Chromium is not installed.
"""

from __future__ import annotations

import json

from tests.browser.conftest import BROWSER_MARKS
from tests.browser.pages import (
    SIGNED_OUT_PATHS,
    axe_violations,
    seed_account,
    seed_tool_chat,
    signed_in_paths,
)

pytestmark = BROWSER_MARKS
BLOCKING = {"serious", "critical"}


def _check(page, found: dict[str, list], suffix: str = "") -> None:
    violations = axe_violations(page)
    if violations:
        found[page.url + suffix] = violations


def test_no_serious_or_critical_axe_violation_on_any_page(page, site, user):
    document = seed_account(user)
    found: dict[str, list] = {}
    page.fill("#content", "Hello there")
    page.keyboard.press("Enter")
    page.wait_for_selector("article.msg-assistant.status-complete")
    _check(page, found)
    chat_url = page.url
    for path in signed_in_paths(document):
        page.goto(site + path)
        _check(page, found)
    # an answer that ran tools: its steps collapsed, then opened
    page.goto(site + seed_tool_chat(user))
    page.wait_for_selector("details.tool-step")
    _check(page, found)
    page.evaluate(
        "document.querySelectorAll('details.tool-step').forEach(d => d.open = true)"
    )
    _check(page, found, suffix=" (tool steps open)")
    page.emulate_media(color_scheme="dark")  # the dark palette's contrast too
    for path in [chat_url, "/documents/", "/settings/"]:
        page.goto(site + path if path.startswith("/") else path)
        _check(page, found, suffix=" (dark)")
    page.emulate_media(color_scheme="light")
    page.context.clear_cookies()
    for path in SIGNED_OUT_PATHS:
        page.goto(site + path)
        _check(page, found)
    print(json.dumps(found, indent=1))  # every violation, for the report
    blocking = {
        url: [v for v in violations if v["impact"] in BLOCKING]
        for url, violations in found.items()
    }
    assert {url: v for url, v in blocking.items() if v} == {}


def test_axe_runs_and_would_report_a_violation(page):
    """The check above can fail: an unlabelled input is reported."""
    page.evaluate(
        "() => { const i = document.createElement('input');"
        " i.id = 'unlabelled-probe'; document.querySelector('main').append(i); }"
    )
    rules = {v["id"] for v in axe_violations(page)}
    assert "label" in rules
