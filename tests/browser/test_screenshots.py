"""Screenshots of the product for the README (`make screenshots`): the chat while an
answer streams, answer versions, search results, an answer citing a document, the
Documents, document, Settings pages, and the chat and its drawer on a phone. Written
to docs/screenshots/ when SCREENSHOTS_DIR says so (the make target), else to
.var/screenshots/.

Skipped where Chromium is not installed.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import BROWSER_MARKS, SHOTS
from tests.browser.pages import seed_account
from tests.browser.test_documents import QUESTION, REAL_EMBEDDINGS, planets  # noqa: F401

pytestmark = [*BROWSER_MARKS, pytest.mark.screenshots]
DESKTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}


def _out() -> Path:
    out = Path(os.environ.get("SCREENSHOTS_DIR") or SHOTS)
    out.mkdir(parents=True, exist_ok=True)
    return out


def _shot(page, name: str) -> Path:
    path = _out() / name
    page.screenshot(path=str(path))
    assert path.stat().st_size > 5_000  # an image, not an empty file
    return path


def test_screenshots_of_every_page(page, site, user):
    document = seed_account(user)
    page.set_viewport_size(DESKTOP)
    page.fill("#content", "Plan my week: three priorities, in short.")
    page.keyboard.press("Enter")
    page.wait_for_selector(
        "article.msg-assistant.status-streaming .msg-body:not(:empty)"
    )
    _shot(page, "chat-streaming.png")
    page.wait_for_selector("article.msg-assistant.status-complete")
    _shot(page, "chat.png")
    conversation_url = page.url
    page.goto(site + "/documents/")
    _shot(page, "documents.png")
    page.goto(site + f"/documents/{document.id}/")
    _shot(page, "document.png")
    page.goto(site + "/settings/")
    _shot(page, "settings.png")
    page.set_viewport_size(PHONE)
    page.emulate_media(reduced_motion="reduce")  # the drawer opens without sliding
    page.goto(conversation_url)
    _shot(page, "phone-chat.png")
    page.click("#sidebar-toggle")
    expect(page.locator("#sidebar")).to_be_in_viewport(ratio=1)
    _shot(page, "phone-drawer.png")


def test_screenshots_of_versions_and_search(page, site):
    page.set_viewport_size(DESKTOP)
    page.fill("#content", "Plan my week: three priorities, in short.")
    page.keyboard.press("Enter")
    page.wait_for_selector("article.msg-assistant.status-complete")
    page.click("#regenerate")
    answer = page.locator("article.msg-assistant").last
    expect(answer.locator(".version-label")).to_have_text("2/2")
    page.wait_for_selector("article.msg-assistant.status-complete")
    _shot(page, "versions.png")
    page.fill(".chat-header input[name=title]", "Weekly plan")
    page.click(".chat-header form.rename button[type=submit]")
    expect(page.locator("#conversation-list")).to_contain_text("Weekly plan")
    page.fill("#search-q", "plan")
    page.press("#search-q", "Enter")
    page.wait_for_selector("li.search-result")
    _shot(page, "search.png")


@pytest.mark.parametrize("script_text", ["Mars has two moons [1]. "])
@REAL_EMBEDDINGS
def test_screenshot_of_an_answer_citing_a_document(planets, page):  # noqa: F811
    page.set_viewport_size(DESKTOP)
    page.reload()  # the document became ready after the page loaded
    page.fill("#content", QUESTION)
    page.keyboard.press("Enter")
    page.wait_for_selector("article.msg-assistant.status-complete .citations li")
    _shot(page, "documents-cited.png")
