"""Screenshots of the product for the README (`make screenshots`), in the light and the
dark theme (the dark ones named ``*-dark.png``): the start page, the chat while an
answer streams and after it, answer versions, search results, an answer citing a
document, the Documents, document, Memory and Settings pages, and the chat, its menu
and its drawer on a phone. Written to docs/screenshots/ when SCREENSHOTS_DIR says so
(the make target), else to .var/screenshots/.

Skipped where Chromium is not installed.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from playwright.sync_api import expect

from gateway.models import ModelPool
from tests.browser.conftest import BROWSER_MARKS, SHOTS
from tests.browser.pages import seed_account
from tests.browser.test_documents import QUESTION, REAL_EMBEDDINGS, planets  # noqa: F401

pytestmark = [*BROWSER_MARKS, pytest.mark.screenshots]
DESKTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}
SCHEMES = [("light", ""), ("dark", "-dark")]
ANSWER = (
    "Here is a plan for the week:\n\n1. **Finish the report** by Wednesday, "
    "so Thursday stays free for review.\n2. **Book the dentist** and renew the "
    "library card in one trip.\n3. **Thirty minutes of exercise** each morning.\n\n"
    "Want me to turn this into a checklist? "
)


def _out() -> Path:
    out = Path(os.environ.get("SCREENSHOTS_DIR") or SHOTS)
    out.mkdir(parents=True, exist_ok=True)
    return out


def _shot(page, name: str) -> Path:
    path = _out() / name
    page.mouse.move(0, 0)  # no tooltip of a hovered button in the picture
    page.screenshot(path=str(path))
    assert path.stat().st_size > 5_000  # an image, not an empty file
    return path


@pytest.mark.parametrize("script_text", [ANSWER])
def test_screenshots_of_every_page(page, site, user):
    document = seed_account(user)
    ModelPool.objects.get_or_create(
        name="default", defaults={"model": "SmolLM2-135M-Instruct"}
    )
    page.emulate_media(reduced_motion="reduce")  # the drawer opens without sliding
    page.set_viewport_size(DESKTOP)
    conversation_url = ""
    for scheme, suffix in SCHEMES:
        page.emulate_media(color_scheme=scheme)
        page.set_viewport_size(DESKTOP)
        page.goto(site + "/")
        _shot(page, f"start{suffix}.png")
        page.fill("#content", "Plan my week: three priorities, in short.")
        page.keyboard.press("Enter")
        page.wait_for_selector(
            "article.msg-assistant.status-streaming .msg-body:not(:empty)"
        )
        _shot(page, f"chat-streaming{suffix}.png")
        page.wait_for_selector("article.msg-assistant.status-complete")
        _shot(page, f"chat{suffix}.png")
        conversation_url = page.url
        page.goto(site + "/documents/")
        _shot(page, f"documents{suffix}.png")
        page.goto(site + f"/documents/{document.id}/")
        _shot(page, f"document{suffix}.png")
        page.goto(site + "/memory/")
        _shot(page, f"memory{suffix}.png")
        page.goto(site + "/settings/")
        _shot(page, f"settings{suffix}.png")
        page.set_viewport_size(PHONE)
        page.goto(site + "/")
        _shot(page, f"phone-start{suffix}.png")
        page.goto(conversation_url)
        _shot(page, f"phone-chat{suffix}.png")
        page.click("#chat-menu-button")
        expect(page.locator("#chat-menu")).to_be_visible()
        _shot(page, f"phone-menu{suffix}.png")
        page.keyboard.press("Escape")
        page.click("#sidebar-toggle")
        expect(page.locator("#sidebar")).to_be_in_viewport(ratio=1)
        _shot(page, f"phone-drawer{suffix}.png")


@pytest.mark.parametrize("script_text", [ANSWER])
def test_screenshots_of_versions_and_search(page, site):
    for scheme, suffix in SCHEMES:
        page.emulate_media(color_scheme=scheme)
        page.set_viewport_size(DESKTOP)
        page.goto(site + "/")
        page.fill("#content", "Plan my week: three priorities, in short.")
        page.keyboard.press("Enter")
        page.wait_for_selector("article.msg-assistant.status-complete")
        answer = page.locator("article.msg-assistant").last
        answer.locator("button.msg-regenerate").click()
        expect(answer.locator(".version-label")).to_have_text("2/2")
        page.wait_for_selector("article.msg-assistant.status-complete")
        answer.hover()  # its actions show as they do under the pointer
        page.screenshot(path=str(_out() / f"versions{suffix}.png"))
        page.click("#chat-menu-button")
        page.fill(".chat-header input[name=title]", "Weekly plan")
        page.click(".chat-header form.rename button[type=submit]")
        expect(page.locator("#conversation-list")).to_contain_text("Weekly plan")
        page.fill("#search-q", "plan")
        page.press("#search-q", "Enter")
        page.wait_for_selector("li.search-result")
        _shot(page, f"search{suffix}.png")


@pytest.mark.parametrize("script_text", ["Mars has two moons [1]. "])
@REAL_EMBEDDINGS
def test_screenshot_of_an_answer_citing_a_document(planets, page, site):  # noqa: F811
    for scheme, suffix in SCHEMES:
        page.emulate_media(color_scheme=scheme)
        page.set_viewport_size(DESKTOP)
        page.goto(site + "/")  # the document became ready after the page loaded
        page.fill("#content", QUESTION)
        page.keyboard.press("Enter")
        page.wait_for_selector("article.msg-assistant.status-complete .citations li")
        _shot(page, f"documents-cited{suffix}.png")


SMALL_PHONE = {"width": 360, "height": 740}
TOOLS = {"CHAT_TOOLS_PROVIDER": "conversations.services.turns.registry.registry_tools"}


@pytest.mark.parametrize("script_text", [ANSWER])
@pytest.mark.parametrize("site_env", [TOOLS])
def test_screenshots_of_the_composer_menus_feedback_and_an_error(page, site, user):
    """The composer's Tools and Documents menus (open, a tool picked: its chip), the
    card a thumbs down opens, the grouped Settings page and the 404 page, on a desktop
    and a small phone (360 px), light and dark."""
    seed_account(user)
    page.emulate_media(reduced_motion="reduce")
    page.set_viewport_size(DESKTOP)
    page.fill("#content", "Plan my week: three priorities, in short.")
    page.keyboard.press("Enter")
    page.wait_for_selector("article.msg-assistant.status-complete")
    chat_url = page.url
    for scheme, suffix in SCHEMES:
        page.emulate_media(color_scheme=scheme)
        for size, prefix in [(DESKTOP, ""), (SMALL_PHONE, "phone-")]:
            page.set_viewport_size(size)
            page.goto(chat_url)
            page.wait_for_selector("article.msg-assistant.status-complete")
            page.click("#tool-picker summary")
            page.get_by_role("radio", name="Run Python").check()
            expect(page.locator("#tool-picker-label")).to_be_visible()  # the chip
            _shot(page, f"{prefix}tools-menu{suffix}.png")
            page.keyboard.press("Escape")
            page.click("#doc-scope summary")
            _shot(page, f"{prefix}documents-menu{suffix}.png")
            page.keyboard.press("Escape")
            answer = page.locator("article.msg-assistant").last
            answer.locator("button[data-rating=down]").click()
            expect(answer.locator("form.feedback-form")).to_be_visible()
            _shot(page, f"{prefix}feedback{suffix}.png")
            page.goto(site + "/settings/")
            page.screenshot(
                path=str(_out() / f"{prefix}settings-full{suffix}.png"), full_page=True
            )
            page.goto(site + "/documents/999999/")
            _shot(page, f"{prefix}not-found{suffix}.png")
