"""Message actions in a real browser (issue 11): regenerate, switch versions, edit and
resend, switch branches, a reload keeps the branch; copy an answer and a code block;
a thumbs down with a reason and a comment. Screenshots go to .var/screenshots/.

Skipped where Chromium is not installed (`make test` installs it when run as root).
"""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from conversations.models import Conversation, Feedback, Message
from tests.browser.conftest import BROWSER_MARKS, SHOTS, last_answer

pytestmark = BROWSER_MARKS
# A button's tooltip (its ::after, site.css) as [top, bottom] in the viewport, px.
TIP_JS = """b => { const s = getComputedStyle(b, "::after"), r = b.getBoundingClientRect();
    const top = r.top + parseFloat(s.top);
    return [top, top + parseFloat(s.height)]; }"""
CODE_ANSWER = "Run this:\n\n```python\nprint('hi')\n```\n\nDone. "


def user_texts(page) -> list[str]:
    return page.locator("article.msg-user .msg-body").all_inner_texts()


def ask(page, text: str, answers: int) -> None:
    page.fill("#content", text)
    page.keyboard.press("Enter")
    expect(page.locator("article.msg-assistant.status-complete")).to_have_count(answers)


def test_regenerate_switch_edit_switch_branches_and_reload_keep_the_branch(page):
    ask(page, "First question", 1)
    last_answer(page).locator(".msg-actions button.msg-regenerate").click()
    label = last_answer(page).locator(".msg-versions span.version-label")
    expect(label).to_have_text("2/2")
    expect(page.locator("article.msg-assistant.status-complete")).to_have_count(1)
    last_answer(page).locator("button.version-prev").click()
    expect(label).to_have_text("1/2")
    first_version = Message.objects.filter(role="assistant").order_by("created_at")[0]
    expect(last_answer(page)).to_have_id(f"m-{first_version.id}")
    page.reload()
    expect(last_answer(page).locator(".version-label")).to_have_text("1/2")
    last_answer(page).locator("button.version-next").click()
    expect(last_answer(page).locator(".version-label")).to_have_text("2/2")

    ask(page, "Second question", 2)
    assert user_texts(page) == ["First question", "Second question"]
    first = page.locator("article.msg-user").first
    first.locator(".msg-actions button.msg-edit").click()
    editor = first.locator("textarea.msg-edit-input")
    expect(editor).to_have_value("First question")
    first.locator("button.msg-edit-cancel").click()
    expect(editor).to_have_count(0)
    first.locator("button.msg-edit").click()
    editor.fill("   ")
    first.locator("button.msg-edit-send").click()
    expect(first.locator(".msg-edit-error")).to_contain_text("empty")
    editor.fill("Edited first question")
    first.locator("button.msg-edit-send").click()
    expect(page.locator("article.msg-user")).to_have_count(1)
    expect(page.locator("article.msg-assistant.status-complete")).to_have_count(1)
    assert user_texts(page) == ["Edited first question"]
    user_label = page.locator("article.msg-user .msg-versions .version-label")
    expect(user_label).to_have_text("2/2")
    page.screenshot(path=str(SHOTS / "threads-edited.png"), full_page=True)

    page.locator("article.msg-user button.version-prev").click()
    expect(page.locator("article.msg-user")).to_have_count(2)
    assert user_texts(page) == ["First question", "Second question"]
    expect(
        page.locator("article.msg-user").first.locator(".version-label")
    ).to_have_text("1/2")
    page.reload()
    expect(page.locator("article.msg-user")).to_have_count(2)
    assert user_texts(page) == ["First question", "Second question"]
    conversation = Conversation.objects.get()
    assert conversation.current_leaf.content == last_answer_text(conversation)


def last_answer_text(conversation: Conversation) -> str:
    second = Message.objects.get(content="Second question")
    return Message.objects.get(parent=second).content


def test_copy_buttons_put_the_markdown_and_the_code_on_the_clipboard(page):
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    ask(page, "Copy me", 1)
    answer = last_answer(page)
    copy = answer.locator(".msg-actions button.msg-copy")
    assert copy.get_attribute("aria-label")
    copy.click()
    expect(copy).to_have_text("Copied")
    stored = Message.objects.get(role="assistant").content
    assert "**bold**" in stored
    assert page.evaluate("navigator.clipboard.readText()") == stored
    expect(copy).to_have_text("")  # the state goes back: the icon alone
    expect(copy).to_have_attribute("aria-label", "Copy answer")
    page.reload()  # the server-rendered answer copies the same source
    copy = last_answer(page).locator("button.msg-copy")
    copy.click()
    expect(copy).to_have_text("Copied")
    assert page.evaluate("navigator.clipboard.readText()") == stored


@pytest.mark.parametrize("script_text", [CODE_ANSWER])
def test_a_code_block_copies_its_code_and_a_thumbs_down_takes_a_reason(page):
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    ask(page, "Show code", 1)
    code_copy = last_answer(page).locator("button.code-copy").first
    assert code_copy.get_attribute("aria-label") == "Copy code"
    code_copy.click()
    expect(code_copy).to_have_text("Copied")
    assert page.evaluate("navigator.clipboard.readText()").strip() == "print('hi')"
    page.reload()
    expect(last_answer(page).locator("button.code-copy").first).to_be_visible()

    last_answer(page).locator(".msg-feedback button[data-rating=down]").click()
    form = last_answer(page).locator("form.feedback-form")
    # the pointer still rests on the thumb: its tooltip leaves the card's Cancel clear
    thumb = last_answer(page).locator(".msg-feedback button[data-rating=down]")
    tip = thumb.evaluate(TIP_JS)
    cancel = form.locator(".feedback-actions .feedback-cancel").bounding_box()
    assert cancel is not None
    assert tip[1] <= cancel["y"] or tip[0] >= cancel["y"] + cancel["height"], tip
    form.locator("select[name=reason]").select_option("wrong")
    form.locator("textarea[name=comment]").fill("It printed the wrong thing")
    page.screenshot(path=str(SHOTS / "threads-feedback-reason.png"), full_page=True)
    form.locator("button[type=submit]").click()
    expect(form).to_have_count(0)
    feedback = Feedback.objects.get()
    assert (feedback.rating, feedback.reason, feedback.comment) == (
        "down",
        "wrong",
        "It printed the wrong thing",
    )


def test_the_edit_box_sends_on_enter_cancels_on_escape_and_hides_the_pencil(page):
    """As in the composer: Enter sends the edit, Shift+Enter is a newline; Escape
    cancels; the Edit (pencil) button is hidden while its editor is open."""
    ask(page, "First question", 1)
    question = page.locator("article.msg-user").first
    pencil = question.locator(".msg-actions button.msg-edit")
    editor = question.locator("textarea.msg-edit-input")
    pencil.click()
    expect(editor).to_be_focused()
    expect(pencil).to_be_hidden()
    page.keyboard.press("Escape")
    expect(editor).to_have_count(0)
    expect(pencil).to_be_visible()
    assert user_texts(page) == ["First question"]

    pencil.click()
    editor.fill("Edited")
    page.keyboard.press("Shift+Enter")
    page.keyboard.type("second line")
    expect(editor).to_have_value("Edited\nsecond line")
    page.keyboard.press("Enter")
    expect(page.locator("article.msg-user .version-label")).to_have_text("2/2")
    expect(page.locator("article.msg-assistant.status-complete")).to_have_count(1)
    edited = Message.objects.filter(role="user").order_by("created_at").last()
    # a form's line breaks travel as CRLF (the HTML form encoding)
    assert edited.content.replace("\r\n", "\n") == "Edited\nsecond line"
