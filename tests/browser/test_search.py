"""Search, export and import in a real browser (Chromium + Playwright): a renamed chat
is found by its new title and by a word of its answer, a result opens the chat at
the message; an export downloads and importing that file creates a copy.

Skipped where Chromium is not installed (`make test` installs it when run as root).
"""

from __future__ import annotations

import json
import re

import pytest
from playwright.sync_api import expect

from conversations.models import Conversation, Message
from tests.browser.conftest import BROWSER_MARKS, SHOTS

pytestmark = BROWSER_MARKS
ANSWER_TEXT = "Basalt lava cools slowly into hexagonal columns. "


@pytest.fixture
def script_text():
    return ANSWER_TEXT


def test_search_finds_a_renamed_chat_and_opens_it_at_the_message(page, site):
    page.fill("#content", "Tell me about the Giant's Causeway")
    page.keyboard.press("Enter")
    page.wait_for_selector("article.msg-assistant.status-complete")
    conv = Conversation.objects.get()
    answer = Message.objects.get(role="assistant")

    page.click("#chat-menu-button")  # rename, export and delete are in one menu
    page.fill("input[name=title]", "Volcano field notes")
    page.click("form.rename button[type=submit]")
    expect(page.locator("#conversation-list")).to_contain_text("Volcano field notes")

    page.fill("#search input[name=q]", "field notes")
    page.keyboard.press("Enter")
    results = page.locator("li.search-result")
    expect(results).to_have_count(1)
    expect(results.first.locator("a")).to_have_text("Volcano field notes")
    expect(results.first.locator("mark").first).to_have_text("field")
    assert results.first.locator("a").get_attribute("href") == f"/c/{conv.id}/"

    page.fill("#search input[name=q]", "hexagonal")
    page.keyboard.press("Enter")
    hit = page.locator("li.search-result").first
    expect(hit.locator(".search-snippet mark").first).to_have_text("hexagonal")
    page.screenshot(path=str(SHOTS / "search-results.png"), full_page=True)
    hit.locator("a").click()
    page.wait_for_url(re.compile(rf"/c/{conv.id}/#m-{answer.id}$"))
    target = page.locator(f"#m-{answer.id}")
    expect(target).to_have_class(re.compile(r"\bsearch-target\b"))
    expect(target).to_be_in_viewport()


def test_export_downloads_and_importing_it_creates_a_copy(page, site, tmp_path):
    page.fill("#content", "Write a haiku about lava")
    page.keyboard.press("Enter")
    page.wait_for_selector("article.msg-assistant.status-complete")
    conv = Conversation.objects.get()

    page.click("#chat-menu-button")
    with page.expect_download() as info:
        page.click("#export-md")
    markdown = tmp_path / "chat.md"
    info.value.save_as(markdown)
    assert info.value.suggested_filename.endswith(".md")
    assert "Write a haiku about lava" in markdown.read_text()

    page.click("#chat-menu-button")  # choosing an item closed the menu
    with page.expect_download() as info:
        page.click("#export-json")
    exported = tmp_path / info.value.suggested_filename
    info.value.save_as(exported)
    data = json.loads(exported.read_text())
    assert data["conversations"][0]["id"] == str(conv.id)

    page.goto(site + "/import/")
    page.set_input_files("input[name=file]", str(exported))
    page.click("#import-submit")
    page.wait_for_url(re.compile(r"/c/[0-9a-f-]{36}/$"))
    expect(page.locator(".flash")).to_contain_text("Imported 1 conversation.")
    # the banner lines up with the thread's column (give or take its scrollbar)
    banner = page.locator(".flash p").bounding_box()
    answer = page.locator("article.msg-assistant").first.bounding_box()
    scrollbar = page.locator("#thread").evaluate("t => t.offsetWidth - t.clientWidth")
    assert banner is not None and answer is not None
    assert abs(banner["x"] - answer["x"]) <= scrollbar + 1
    assert abs(banner["width"] - answer["width"]) <= scrollbar + 1
    copy = Conversation.objects.exclude(id=conv.id).get()
    assert page.url.endswith(f"/c/{copy.id}/")
    expect(page.locator("article.msg-user .msg-body")).to_have_text(
        "Write a haiku about lava"
    )
    assert list(copy.messages.values_list("role", "content")) == list(
        conv.messages.values_list("role", "content")
    )


def test_a_result_on_another_branch_shows_it_without_making_it_current(
    page, site, user
):
    """A search hit in an answer of a branch that is not shown opens that branch for
    viewing and outlines the message; the stored current branch stays (a reload of
    the conversation's URL shows it) until the user sends a message from the branch
    viewed, which then becomes current."""
    conv = Conversation.objects.create(user=user, title="Stripes")
    question = Message.objects.create(
        conversation=conv, role="user", content="Why do zebras have stripes?"
    )
    old = Message.objects.create(
        conversation=conv,
        role="assistant",
        parent=question,
        content="Stripes may confuse biting flies such as tsetse.",
    )
    edited = Message.objects.create(
        conversation=conv, role="user", content="Why do tigers have stripes?"
    )
    shown = Message.objects.create(
        conversation=conv,
        role="assistant",
        parent=edited,
        content="Tigers hide in tall grass.",
    )
    conv.current_leaf = shown
    conv.save(update_fields=["current_leaf"])
    page.goto(site + "/search/?q=tsetse")
    page.locator("li.search-result a").first.click()
    target = page.locator(f"#m-{old.id}")
    expect(target).to_have_class(re.compile("search-target"))
    expect(page.locator("#thread")).not_to_contain_text("Tigers hide")
    conv.refresh_from_db()
    assert conv.current_leaf_id == shown.id  # viewing stored nothing
    # the plain conversation URL shows the stored current branch
    page.goto(site + f"/c/{conv.id}/")
    expect(page.locator("#thread")).to_contain_text("Tigers hide")
    expect(page.locator("#thread")).not_to_contain_text("tsetse")
    # open the hit again and continue from the branch viewed: it becomes current
    page.goto(site + f"/c/{conv.id}/#m-{old.id}")
    expect(page.locator(f"#m-{old.id}")).to_have_class(re.compile("search-target"))
    page.fill("#content", "And horses?")
    page.keyboard.press("Enter")
    page.wait_for_selector("article.msg-assistant.status-complete >> nth=1")
    asked = Message.objects.get(role="user", content="And horses?")
    assert asked.parent_id == old.id
    conv.refresh_from_db()
    assert conv.current_leaf.parent_id == asked.id
    page.goto(site + f"/c/{conv.id}/")
    expect(page.locator("#thread")).to_contain_text("tsetse")
    expect(page.locator("#thread")).to_contain_text("And horses?")
