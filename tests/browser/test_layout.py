"""The shared layout in Chromium: at a phone's width (360×740) no page scrolls
sideways, the sidebar is a drawer that its labelled toggle opens and Esc closes; the
skip link leads to the page; the Documents page turns Processing into Ready by itself.

Skipped where Chromium is not installed.
"""

from __future__ import annotations

from playwright.sync_api import expect

from memory.models import Document
from tests.browser.conftest import BROWSER_MARKS
from tests.browser.pages import SIGNED_OUT_PATHS, seed_account, signed_in_paths

pytestmark = BROWSER_MARKS
PHONE = {"width": 360, "height": 740}


def _scroll_width(page) -> int:
    return page.evaluate("() => document.documentElement.scrollWidth")


def test_no_page_overflows_a_360px_screen(page, site, user):
    document = seed_account(user)
    page.set_viewport_size(PHONE)
    page.fill("#content", "A question " * 8)
    page.keyboard.press("Enter")
    page.wait_for_selector("article.msg-assistant.status-complete")
    widths = {page.url: _scroll_width(page)}
    for path in signed_in_paths(document):
        page.goto(site + path)
        widths[page.url] = _scroll_width(page)
    page.context.clear_cookies()
    for path in SIGNED_OUT_PATHS:
        page.goto(site + path)
        widths[page.url] = _scroll_width(page)
    assert {url: w for url, w in widths.items() if w > PHONE["width"]} == {}


def test_the_drawer_opens_with_its_toggle_and_closes_with_escape(page):
    page.set_viewport_size(PHONE)
    toggle = page.locator("#sidebar-toggle")
    sidebar = page.locator("#sidebar")
    expect(toggle).to_be_visible()
    expect(toggle).to_have_attribute("aria-expanded", "false")
    expect(sidebar).to_be_hidden()  # out of view and out of the tab order
    expect(page.locator("#composer")).to_be_visible()  # the chat fills the screen
    expect(page.locator("#stop")).to_be_hidden()  # [hidden] beats the button styles
    toggle.click()
    expect(toggle).to_have_attribute("aria-expanded", "true")
    expect(sidebar.get_by_role("link", name="Settings")).to_be_visible()
    expect(sidebar.get_by_role("button", name="Log out")).to_be_in_viewport()
    page.keyboard.press("Escape")
    expect(toggle).to_have_attribute("aria-expanded", "false")
    expect(sidebar).to_be_hidden()
    expect(toggle).to_be_focused()
    assert _scroll_width(page) <= PHONE["width"]


def test_on_a_wide_screen_the_sidebar_shows_and_the_toggle_does_not(page):
    page.set_viewport_size({"width": 1280, "height": 800})
    expect(page.locator("#sidebar")).to_be_visible()
    expect(page.locator("#sidebar-toggle")).to_be_hidden()


def test_the_skip_link_is_the_first_stop_and_leads_to_the_page(page, site):
    page.goto(site + "/settings/")
    page.keyboard.press("Tab")
    skip = page.locator(".skip-link")
    expect(skip).to_be_focused()
    expect(skip).to_be_in_viewport()
    page.keyboard.press("Enter")
    expect(page.locator("#main-content")).to_be_focused()


def test_a_new_api_key_is_in_view_and_focused_after_creating_it(page, site):
    """The one-time key sits far down the settings page: the create redirect lands on
    it and focuses it, so it is seen and a screen reader reads it."""
    page.set_viewport_size({"width": 1280, "height": 850})
    page.goto(site + "/settings/")
    page.fill("#key-name", "script")
    page.get_by_role("button", name="Create a key").click()
    block = page.locator("#new-key")
    expect(block).to_be_focused()
    expect(page.locator("#new-api-key")).to_be_in_viewport(ratio=1)
    expect(block).to_have_accessible_name(
        "Your new key. Copy it now: it will not be shown again."
    )


def test_documents_page_turns_processing_into_ready_without_a_reload(page, site, user):
    document = Document.objects.create(
        user=user,
        title="notes.txt",
        content_type="txt",
        status=Document.Status.PROCESSING,
    )
    page.goto(site + "/documents/")
    row = page.locator(f"tr[data-document-id='{document.id}']")
    expect(row.locator("td.status")).to_have_text("Processing")
    page.evaluate("() => { window.__notReloaded = true; }")
    Document.objects.filter(id=document.id).update(
        status=Document.Status.READY, chunk_count=3
    )
    expect(row.locator("td.status")).to_have_text("Ready", timeout=15_000)
    expect(row.locator("td.passages")).to_have_text("3")
    assert page.evaluate("() => window.__notReloaded") is True


def test_a_documents_delete_button_is_on_a_small_phone_screen(page, site, user):
    """At 360 px the Documents table keeps title, status and Delete in view (size,
    date and passages are on the document's page), with no sideways scrolling."""
    seed_account(user)
    page.set_viewport_size({"width": 360, "height": 740})
    page.goto(site + "/documents/")
    delete = page.locator(".row-actions .delete-link").first
    box = delete.bounding_box()
    assert box is not None and box["x"] + box["width"] <= 360
    assert box["height"] >= 44
    assert page.evaluate("document.documentElement.scrollWidth") <= 360


def test_a_long_failure_reason_wraps_and_the_documents_row_fits(page, site, user):
    """A failed document's reason wraps in its cell: at 1280 px and on a phone the
    table fits its box (no sideways scroller) and Delete stays in view."""
    Document.objects.create(
        user=user,
        title="latin.txt",
        content_type="txt",
        status=Document.Status.FAILED,
        error='"latin.txt" is not UTF-8 text. Save it as UTF-8 and upload it again.',
    )
    for size in [{"width": 1280, "height": 850}, PHONE]:
        page.set_viewport_size(size)
        page.goto(site + "/documents/")
        wrap = page.locator(".table-wrap")
        widths = wrap.evaluate("w => [w.scrollWidth, w.clientWidth]")
        assert widths[0] <= widths[1], size
        expect(page.locator(".row-actions .delete-link")).to_be_in_viewport(ratio=1)
