"""Accessibility of every page in Chromium, in the light and the dark theme: axe-core
finds no violation of any impact (all are printed), on the start page, the chat with a
streamed answer, its header menu, Tools and Documents menus and thumbs-down form open,
the search, import, Documents, document, Memory, Settings, confirmation and error pages, an answer whose tool steps are shown
collapsed and open, and the sign-in and sign-up pages.

Skipped where Chromium is not installed.
"""

from __future__ import annotations

import json

import pytest

from tests.browser.conftest import BROWSER_MARKS
from tests.browser.pages import (
    SIGNED_OUT_PATHS,
    axe_violations,
    seed_account,
    seed_tool_chat,
    signed_in_paths,
)

pytestmark = BROWSER_MARKS
EXTRA_PATHS = ["/", "/search/?q=hello", "/search/", "/import/"]


def _check(page, found: dict[str, list], suffix: str = "") -> None:
    violations = axe_violations(page)
    if violations:
        found[page.url + suffix] = violations


@pytest.mark.parametrize(
    "site_env",
    [{"CHAT_TOOLS_PROVIDER": "conversations.services.turns.registry.registry_tools"}],
)
def test_no_axe_violation_on_any_page_in_either_theme(page, site, user):
    document = seed_account(user)
    page.fill("#content", "Hello there")
    page.keyboard.press("Enter")
    page.wait_for_selector("article.msg-assistant.status-complete")
    chat_url = page.url
    tool_chat = seed_tool_chat(user)
    found: dict[str, list] = {}
    for scheme in ("light", "dark"):
        suffix = f" ({scheme})"
        page.emulate_media(color_scheme=scheme)
        page.goto(chat_url)
        page.wait_for_selector("article.msg-assistant.status-complete")
        _check(page, found, suffix)
        page.click("#chat-menu-button")
        _check(page, found, suffix + " menu open")
        page.keyboard.press("Escape")
        # the composer's menus open, a tool picked (its chip), and the thumbs-down card
        page.click("#tool-picker summary")
        page.get_by_role("radio", name="Run Python").check()
        _check(page, found, suffix + " tools menu open")
        page.keyboard.press("Escape")
        page.click("#doc-scope summary")
        _check(page, found, suffix + " documents menu open")
        page.keyboard.press("Escape")
        page.locator("article.msg-assistant button[data-rating=down]").last.click()
        page.wait_for_selector("form.feedback-form")
        _check(page, found, suffix + " feedback form open")
        for path in [*EXTRA_PATHS, *signed_in_paths(document)]:
            page.goto(site + path)
            _check(page, found, suffix)
        # an answer that ran tools: its steps collapsed, then opened
        page.goto(site + tool_chat)
        page.wait_for_selector("details.tool-step")
        _check(page, found, suffix)
        page.evaluate(
            "document.querySelectorAll('details.tool-step').forEach(d => d.open = true)"
        )
        _check(page, found, suffix + " tool steps open")
    # the theme the user chose (stored, rendered as <html data-theme>) over the system's
    page.emulate_media(color_scheme="light")
    page.goto(chat_url)
    page.click("#theme-toggle")
    page.wait_for_load_state("networkidle")
    page.goto(chat_url)
    assert page.locator("html").get_attribute("data-theme") == "dark"
    _check(page, found, " (dark by choice)")
    page.context.clear_cookies()
    for scheme in ("light", "dark"):
        page.emulate_media(color_scheme=scheme)
        for path in SIGNED_OUT_PATHS:
            page.goto(site + path)
            _check(page, found, f" ({scheme})")
    print(json.dumps(found, indent=1))  # every violation, for the report
    assert found == {}


def test_axe_runs_and_would_report_a_violation(page):
    """The check above can fail: an unlabelled input is reported."""
    page.evaluate(
        "() => { const i = document.createElement('input');"
        " i.id = 'unlabelled-probe'; document.querySelector('main').append(i); }"
    )
    rules = {v["id"] for v in axe_violations(page)}
    assert "label" in rules
