"""The sidebar's chat list in a real browser (Chromium + Playwright): a new chat joins
it under Today as the page's own, a generated title shows without a reload
(static/titles.js), and the grouped list is on every signed-in page, from where a
chat opens. Prefix search: the start of a word finds a renamed chat and a message,
an empty search lists recent chats.

Skipped where Chromium is not installed (`make test` installs it when run as root).
"""

from __future__ import annotations

import datetime as dt
import re

from django.urls import reverse
from django.utils import timezone
from playwright.sync_api import expect

from conversations.models import Conversation
from tests.browser.conftest import BROWSER_MARKS

pytestmark = BROWSER_MARKS

PAGES = [
    "conversation-search",
    "document-list",
    "memory-page",
    "account-settings",
    "conversations-import",
    "chat-home",
]


def group(page, title):
    """The list's date group headed ``title`` (a locator)."""
    return page.locator("#conversation-list section.conv-group").filter(
        has=page.locator("h2.conv-group-title", has_text=re.compile(f"^{title}$"))
    )


def test_a_new_chat_joins_the_list_and_the_list_is_on_every_page(page, site, user):
    expect(page.locator("#conversation-list #no-conversations")).to_be_visible()
    long_ago = timezone.now() - dt.timedelta(days=30)
    old = Conversation.objects.create(
        user=user, title="Glacier survey", created_at=long_ago, updated_at=long_ago
    )

    page.fill("#content", "Tell me about **basalt** columns")
    page.keyboard.press("Enter")
    link = page.locator("#conversation-list a.conv-link.active")
    expect(link).to_have_text("Tell me about basalt columns")
    expect(link).to_have_attribute("aria-current", "page")
    expect(page.locator("#conversation-list section.conv-group").first).to_contain_text(
        "Today"
    )
    expect(page.locator("#no-conversations")).to_have_count(0)
    page.wait_for_selector("article.msg-assistant.status-complete")
    conv = Conversation.objects.exclude(id=old.id).get()
    # what the title job writes; titles.js shows it in the list without a reload
    Conversation.objects.filter(id=conv.id).update(title="Basalt columns")
    expect(group(page, "Today").locator("a.conv-link.active")).to_have_text(
        "Basalt columns"
    )

    for name in PAGES:
        page.goto(site + reverse(name))
        nav = page.locator("nav#conversation-list[aria-label=Conversations]")
        expect(nav).to_be_visible()
        expect(group(page, "Today").locator("a.conv-link")).to_have_text(
            ["Basalt columns"]
        )
        expect(group(page, "Older").locator("a.conv-link")).to_have_text(
            ["Glacier survey"]
        )
        expect(nav.locator("a[aria-current]")).to_have_count(0)

    page.goto(site + reverse("document-list"))
    group(page, "Older").locator("a.conv-link").click()
    page.wait_for_url(re.compile(rf"/c/{old.id}/$"))
    active = page.locator("#conversation-list a.conv-link.active")
    expect(active).to_have_text("Glacier survey")
    expect(active).to_have_attribute("aria-current", "page")


def test_search_finds_the_start_of_words_and_an_empty_search_lists_recent_chats(
    page, site
):
    page.fill("#content", "what is a quokkaplatypus?")
    page.keyboard.press("Enter")
    page.wait_for_selector("article.msg-assistant.status-complete")
    conv = Conversation.objects.get()
    page.click("#chat-menu-button")  # rename is in the conversation's menu
    page.fill("input[name=title]", "zebrafishwombat")
    page.click("form.rename button[type=submit]")
    expect(page.locator("#conversation-list")).to_contain_text("zebrafishwombat")

    page.fill("#search input[name=q]", "zebrafish")
    page.keyboard.press("Enter")
    hits = page.locator("li.search-result.search-title-hit")
    expect(hits).to_have_count(1)
    expect(hits.first.locator("mark")).to_have_text("zebrafishwombat")

    page.fill("#search-page-q", "quokka")
    page.keyboard.press("Enter")
    snippet = page.locator("li.search-result .search-snippet mark")
    expect(snippet.first).to_have_text("quokkaplatypus")

    page.fill("#search-page-q", "")
    page.keyboard.press("Enter")
    expect(page.locator("#recent-heading")).to_have_text("Recent chats")
    recent = page.locator("#search-results li.search-recent-item a")
    expect(recent).to_have_text(["zebrafishwombat"])
    assert recent.first.get_attribute("href") == f"/c/{conv.id}/"
    expect(page.locator("#search-error")).to_have_count(0)
