"""The chat's look and feel in Chromium (issue 27): on a 360×740 phone nothing is wider
than the screen at any step of a new chat's first turn and the conversation keeps at
least 70 % of the height; icon buttons have accessible names and tooltips and no emoji
serves as UI; the theme toggle's choice is stored per user; the header's actions sit in
one keyboard-usable menu; an ended answer's status line and actions are in view; the
start page's chips fill the composer; "jump to latest" shows when the reader scrolled
up; token counts are formatted for the reader's locale.

Skipped where Chromium is not installed.
"""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from accounts.models import Appearance
from conversations.models import Message
from gateway.models import ModelPool
from tests.browser.conftest import BROWSER_MARKS, SHOTS, last_answer
from tests.browser.pages import axe_violations, seed_tool_chat

pytestmark = BROWSER_MARKS
PHONE = {"width": 360, "height": 740}
DESKTOP = {"width": 1280, "height": 800}
# Emoji and pictographs (the thumbs, ☰, ↻ … the page once used): none may be UI text.
EMOJI = re.compile("[\U0001f300-\U0001faff\u2600-\u27bf\u2190-\u21ff\u2630]")
LONG = "A sentence that keeps the answer going for a while. " * 3


def _layout(page) -> dict:
    """Widths and heights that the phone rules are about, measured in the page."""
    return page.evaluate(
        """() => {
          const vw = window.innerWidth, vh = window.innerHeight;
          const wide = [...document.querySelectorAll('body *')].filter(el => {
            const r = el.getBoundingClientRect(), s = getComputedStyle(el);
            return r.width > 0 && s.visibility !== 'hidden' && r.right > vw + 0.5
              && !el.closest('#sidebar') && !el.closest('.visually-hidden, .sr-only, .msg-role');
          }).map(el => el.tagName + '.' + el.className + '#' + el.id);
          return {
            scrollWidth: document.documentElement.scrollWidth,
            wide: wide,
            thread: document.getElementById('thread').getBoundingClientRect().height / vh,
          };
        }"""
    )


def _assert_fits(page, step: str) -> None:
    layout = _layout(page)
    print(
        step, f"thread {layout['thread']:.0%}", f"scrollWidth {layout['scrollWidth']}"
    )
    assert layout["scrollWidth"] <= PHONE["width"], (step, layout)
    assert layout["wide"] == [], (step, layout)
    assert layout["thread"] >= 0.7, (step, layout)


@pytest.mark.parametrize("script_text", [LONG])
def test_a_phone_keeps_the_conversation_on_screen_at_every_step(page):
    page.set_viewport_size(PHONE)
    page.reload()
    _assert_fits(page, "start page")
    page.fill("#content", "What is the weather like on Mars, in short?")
    _assert_fits(page, "before send")
    page.keyboard.press("Enter")
    page.wait_for_selector(
        "article.msg-assistant.status-streaming .msg-body:not(:empty)"
    )
    _assert_fits(page, "while streaming")
    page.wait_for_selector("article.msg-assistant.status-complete")
    _assert_fits(page, "after the answer")
    menu_button = page.locator("#chat-menu-button")  # the header built on the page
    expect(menu_button).to_be_visible()
    _assert_fits(page, "after the header is rebuilt")
    menu_button.click()
    expect(page.locator("#chat-menu")).to_be_visible()
    _assert_fits(page, "menu open")
    page.screenshot(path=str(SHOTS / "look-phone-menu.png"))
    page.keyboard.press("Escape")
    page.reload()
    _assert_fits(page, "after a reload")
    # tap targets: every visible control of the chat is at least 44 px square
    small = page.evaluate(
        """() => [...document.querySelectorAll(
              '.topbar button, #chat button, #chat select, #chat summary')]
          .filter(el => el.getClientRects().length && getComputedStyle(el).visibility !== 'hidden')
          .map(el => [el.className || el.id || el.tagName, el.getBoundingClientRect()])
          .filter(([, r]) => r.width > 0 && (r.width < 44 || r.height < 44))
          .map(([name, r]) => name + ' ' + Math.round(r.width) + 'x' + Math.round(r.height))"""
    )
    assert small == []
    page.screenshot(path=str(SHOTS / "look-phone.png"))


def test_icon_buttons_have_names_and_tooltips_and_no_emoji_is_ui(page):
    page.fill("#content", "Hello")
    page.keyboard.press("Enter")
    page.wait_for_selector("article.msg-assistant.status-complete")
    for state in ("live", "reloaded"):
        buttons = page.locator("button.icon-btn")
        assert buttons.count() >= 8, state
        unnamed = page.evaluate(
            """() => [...document.querySelectorAll('button.icon-btn')]
              .filter(b => !(b.getAttribute('aria-label') || '').trim()
                           || !b.querySelector('svg.icon use'))
              .map(b => b.outerHTML)"""
        )
        assert unnamed == [], state
        answer = last_answer(page)
        for name in ("Copy answer", "Regenerate answer", "Good answer", "Bad answer"):
            expect(answer.get_by_role("button", name=name)).to_have_count(1)
        expect(page.get_by_role("button", name="Edit message")).to_have_count(1)
        expect(page.get_by_role("button", name="Conversation actions")).to_be_visible()
        # the icons are drawn (the sprite loaded under the CSP): an icon has a size
        box = answer.locator("button.msg-copy svg").bounding_box()
        assert box and box["width"] >= 14
        assert not EMOJI.search(page.locator("body").inner_text()), state
        # one Regenerate control: the answer's own, no second bar under the thread
        expect(page.locator("#regenerate")).to_have_count(0)
        page.reload()
    # a tooltip shows on hover
    copy = last_answer(page).locator("button.msg-copy")
    copy.hover()
    tip = copy.evaluate("b => getComputedStyle(b, '::after').content")
    assert tip == '"Copy"'


def test_the_theme_toggle_is_stored_and_survives_a_reload(page, user):
    html = page.locator("html")
    expect(html).to_have_attribute("data-theme", "system")
    light_bg = page.evaluate("getComputedStyle(document.body).backgroundColor")
    toggle = page.locator("#theme-toggle")
    expect(toggle).to_have_attribute("aria-label", "Switch to dark theme")
    toggle.click()
    expect(html).to_have_attribute("data-theme", "dark")
    expect(toggle).to_have_attribute("aria-label", "Switch to light theme")
    assert page.evaluate("getComputedStyle(document.body).backgroundColor") != light_bg
    page.wait_for_load_state("networkidle")  # the POST that stores the choice
    page.reload()
    expect(html).to_have_attribute("data-theme", "dark")  # rendered by the server
    assert Appearance.objects.get(user=user).theme == "dark"
    page.screenshot(path=str(SHOTS / "look-dark.png"))
    page.goto(page.url.split("/c/")[0] + "/settings/")
    expect(html).to_have_attribute("data-theme", "dark")  # on every page
    page.locator("#theme-toggle").click()
    expect(html).to_have_attribute("data-theme", "light")
    page.reload()
    expect(html).to_have_attribute("data-theme", "light")


def test_the_system_dark_preference_applies_until_the_user_chooses(page):
    page.emulate_media(color_scheme="dark")
    page.reload()
    expect(page.locator("#theme-toggle")).to_have_attribute(
        "aria-label", "Switch to light theme"
    )
    dark_bg = page.evaluate("getComputedStyle(document.body).backgroundColor")
    page.emulate_media(color_scheme="light")
    assert page.evaluate("getComputedStyle(document.body).backgroundColor") != dark_bg


def test_the_header_actions_are_one_keyboard_menu(page):
    page.fill("#content", "Hello")
    page.keyboard.press("Enter")
    page.wait_for_selector("article.msg-assistant.status-complete")
    for _state in ("built on the page", "rendered by the server"):
        button = page.locator("#chat-menu-button")
        menu = page.locator("#chat-menu")
        expect(menu).to_be_hidden()
        expect(page.locator("#export-md")).to_be_hidden()  # not always visible
        button.focus()
        page.keyboard.press("Enter")
        expect(button).to_have_attribute("aria-expanded", "true")
        expect(menu).to_be_visible()
        expect(page.locator("#chat-title-input")).to_be_focused()
        for name in ("Export as Markdown", "Export as JSON", "Delete"):
            expect(menu.get_by_role("link", name=name)).to_be_visible()
        page.keyboard.press("ArrowDown")  # to the Save button, then the links
        page.keyboard.press("ArrowDown")
        expect(page.locator("#export-md")).to_be_focused()
        page.keyboard.press("Escape")
        expect(menu).to_be_hidden()
        expect(button).to_be_focused()
        # a click outside closes it too
        button.click()
        expect(menu).to_be_visible()
        page.locator("#composer-hint").click()
        expect(menu).to_be_hidden()
        page.reload()
    page.locator("#chat-menu-button").click()
    page.fill("#chat-title-input", "Renamed from the menu")
    page.locator("#chat-menu button[type=submit]").click()
    expect(page.locator("#chat-title")).to_have_text("Renamed from the menu")


@pytest.mark.parametrize("script_text", ["A long answer line. " * 12])
def test_an_answer_that_ends_shows_its_status_line_and_actions(page):
    page.set_viewport_size({"width": 1280, "height": 480})
    for i in range(3):
        page.fill("#content", f"Question {i}")
        page.keyboard.press("Enter")
        page.wait_for_selector(
            f"article.msg-assistant.status-complete >> nth={i}", timeout=30_000
        )
    answer = last_answer(page)
    expect(answer.locator(".msg-meta")).to_be_in_viewport()
    expect(answer.locator("button.msg-copy")).to_be_in_viewport()
    expect(answer.locator("button.msg-regenerate")).to_be_visible()  # newest: shown
    # scrolled up, the reader gets a "jump to latest" button that brings them back
    jump = page.locator("#jump-latest")
    expect(jump).to_be_hidden()
    assert page.locator("#thread").evaluate(
        "t => t.scrollHeight > t.clientHeight + 200"
    )
    page.locator("#thread").evaluate("t => t.scrollTo(0, 0)")
    expect(jump).to_be_visible()
    jump.click()
    expect(answer.locator(".msg-meta")).to_be_in_viewport()
    expect(jump).to_be_hidden()


def test_the_start_page_names_the_model_and_its_chips_fill_the_composer(page):
    # the pool the migrations seed (a transactional test starts without it)
    ModelPool.objects.get_or_create(name="default", defaults={"model": "Tiny Model 1"})
    page.reload()
    welcome = page.locator("#welcome")
    expect(welcome).to_be_visible()
    expect(page.locator("#welcome-model")).to_have_text("Tiny Model 1")
    chips = welcome.locator("button.chip")
    assert chips.count() >= 3
    chips.first.click()
    prompt = chips.first.get_attribute("data-prompt")
    expect(page.locator("#content")).to_have_value(prompt)
    expect(page.locator("#content")).to_be_focused()
    page.keyboard.press("Enter")
    expect(welcome).to_have_count(0)
    expect(page.locator("article.msg-user .msg-body")).to_have_text(prompt)


def test_a_chip_keeps_a_typed_draft_and_adds_its_prompt_after_it(page):
    """A chip clicked over a draft adds its prompt on a new line, the draft kept; a
    second chip replaces the first chip's prompt in a box that held only that."""
    chips = page.locator("#welcome button.chip")
    box = page.locator("#content")
    box.fill("line one\nline two")
    chips.last.click()
    prompt = chips.last.get_attribute("data-prompt")
    expect(box).to_have_value("line one\nline two\n" + prompt)
    expect(box).to_be_focused()
    box.fill("")
    chips.first.click()
    chips.nth(1).click()
    expect(box).to_have_value(chips.nth(1).get_attribute("data-prompt") or "")


def test_token_counts_are_formatted_for_the_readers_locale(page):
    page.fill("#content", "Hello")
    page.keyboard.press("Enter")
    page.wait_for_selector("article.msg-assistant.status-complete")
    Message.objects.filter(role="assistant").update(token_count=1998589)
    page.reload()
    meta = last_answer(page).locator(".msg-meta")
    expected = page.evaluate(
        "new Intl.NumberFormat(navigator.language).format(1998589)"
    )
    assert expected == "1,998,589"  # Chromium here reads en-US
    expect(meta).to_contain_text("1,998,589 tokens")


def test_quiet_figures_and_no_empty_row_under_a_user_bubble(page):
    """The model/tokens line shows on hover or keyboard focus of its answer (and is
    read by screen readers all along); a user turn's Edit button sits beside its
    bubble, so the turn is no taller than the bubble."""
    page.set_viewport_size({"width": 1280, "height": 800})
    page.fill("#content", "Hello")
    page.keyboard.press("Enter")
    page.wait_for_selector("article.msg-assistant.status-complete")
    page.mouse.move(0, 0)
    meta = last_answer(page).locator(".msg-meta")
    expect(meta).to_contain_text("tokens")
    expect(meta).to_have_css("opacity", "0")
    last_answer(page).locator("button.msg-copy").focus()
    expect(meta).to_have_css("opacity", "1")
    user_turn = page.locator("article.msg-user").first
    turn = user_turn.bounding_box()
    bubble = user_turn.locator(".msg-body").bounding_box()
    assert turn is not None and bubble is not None
    assert turn["height"] <= bubble["height"] + 2
    edit = user_turn.locator("button.msg-edit")
    edit.focus()
    expect(edit).to_have_css("opacity", "1")
    box = edit.bounding_box()
    assert box is not None and box["x"] + box["width"] <= bubble["x"]


def test_an_opened_tool_step_is_dark_in_the_dark_theme_and_readable(page, site, user):
    """The code, output and error boxes of an opened tool step follow the palette: no
    near-white box on the dark page, and axe-core finds no violation (contrast
    included) with the steps open."""
    path = seed_tool_chat(user)
    page.emulate_media(color_scheme="dark")
    page.goto(site + path)
    page.wait_for_selector("details.tool-step")
    page.evaluate(
        "document.querySelectorAll('details.tool-step').forEach(d => d.open = true)"
    )
    boxes = page.locator("details.tool-step .tool-body pre")
    assert boxes.count() >= 2
    lightness = page.evaluate(
        """() => [...document.querySelectorAll('details.tool-step .tool-body pre')]
          .map(el => getComputedStyle(el).backgroundColor.match(/[\\d.]+/g)
            .slice(0, 3).map(Number))
          .map(([r, g, b]) => (0.2126 * r + 0.7152 * g + 0.0722 * b) / 255)"""
    )
    assert all(value < 0.3 for value in lightness), lightness
    assert axe_violations(page) == []
    page.screenshot(path=str(SHOTS / "look-dark-tool-step.png"), full_page=True)


def test_a_click_on_the_conversation_menu_puts_the_focus_in_rename(page):
    """Opened with the mouse, as with Enter, the conversation menu focuses the Rename
    field with its text selected: what is typed replaces the title."""
    page.fill("#content", "Hello")
    page.keyboard.press("Enter")
    page.wait_for_selector("article.msg-assistant.status-complete")
    for _state in ("built on the page", "rendered by the server"):
        page.locator("#chat-menu-button").click()
        field = page.locator("#chat-title-input")
        expect(field).to_be_focused()
        page.keyboard.type("Renamed by click")
        expect(field).to_have_value("Renamed by click")
        page.keyboard.press("Escape")
        page.reload()


def test_error_banners_sit_in_the_page_column(page, site, tmp_path):
    """The flash of a refused import (/import/, bad JSON) and of a refused upload
    (/documents/, a type it does not take) line up with the page's heading, not with
    the window's right edge."""
    bad_json = tmp_path / "broken.json"
    bad_json.write_text("{not json")
    bad_type = tmp_path / "program.exe"
    bad_type.write_bytes(b"MZ")
    for path, field, upload in [
        ("/import/", "input[name=file]", bad_json),
        ("/documents/", "#document-file", bad_type),
    ]:
        page.goto(site + path)
        page.set_input_files(field, str(upload))
        page.locator(field).evaluate("input => input.form.requestSubmit()")
        banner = page.locator(".flash p.flash-error")
        expect(banner).to_be_visible()
        box = banner.bounding_box()
        heading = page.locator("main.page h1").bounding_box()
        assert abs(box["x"] - heading["x"]) < 1, path
        assert abs((box["x"] + box["width"]) - (heading["x"] + heading["width"])) < 1, (
            path
        )
