"""The whole chat as a new user lives it, in one Chromium session (issue 11): sign up →
chat → the answer grows between two reads → Stop → Regenerate → switch versions →
edit and resend → switch branches and reload → rename → search finds the renamed chat
and a word from an answer → export → import → delete. Each step asserts what the
page shows and what is stored."""

from __future__ import annotations

import json
import re

from playwright.sync_api import expect

from conversations.models import Conversation, Message
from tests.browser.conftest import BROWSER_MARKS, SHOTS

pytestmark = BROWSER_MARKS

NEWCOMER = "newcomer"
PASSWORD = "a-long-passphrase-42"


def sign_up(page, site):
    page.context.clear_cookies()
    page.goto(site + "/signup/")
    page.fill("input[name=username]", NEWCOMER)
    page.fill("input[name=password1]", PASSWORD)
    page.fill("input[name=password2]", PASSWORD)
    page.click("main button[type=submit]")
    page.wait_for_selector("#composer")


def test_a_new_user_chats_branches_searches_exports_imports_and_deletes(page, site):
    sign_up(page, site)
    thread = page.locator("#thread")

    # chat: the answer is read twice while it streams and has grown in between
    page.fill("#content", "Tell me about rainbows")
    page.keyboard.press("Enter")
    answer = thread.locator("article.msg-assistant").last
    page.wait_for_selector(
        "article.msg-assistant.status-streaming .msg-body:not(:empty)"
    )
    first_read = answer.locator(".msg-body").inner_text()
    expect(answer.locator(".msg-body")).not_to_have_text(first_read)
    assert len(answer.locator(".msg-body").inner_text()) > len(first_read)

    # Stop keeps the partial answer
    page.click("#stop")
    page.wait_for_selector("article.msg-assistant.status-cancelled")
    stopped = Message.objects.get(
        role="assistant", conversation__user__username=NEWCOMER
    )
    assert stopped.status == "cancelled"

    # Regenerate adds a second version, shown as 2/2
    thread.locator("article.msg-assistant").last.locator(
        "button.msg-regenerate"
    ).click()
    page.wait_for_selector("article.msg-assistant.status-complete")
    answer = thread.locator("article.msg-assistant").last
    expect(answer.locator(".version-label")).to_have_text("2/2")

    # switch versions: back to the stopped one, then forward again
    answer.locator("button.version-prev").click()
    expect(thread.locator("article.msg-assistant").last).to_have_class(
        re.compile("status-cancelled")
    )
    expect(thread.locator("article.msg-assistant .version-label").last).to_have_text(
        "1/2"
    )
    thread.locator("article.msg-assistant button.version-next").last.click()
    expect(thread.locator("article.msg-assistant .version-label").last).to_have_text(
        "2/2"
    )

    # edit the question and resend: a second branch with its own answer
    question = thread.locator("article.msg-user").first
    question.locator("button.msg-edit").click()
    question.locator("textarea.msg-edit-input").fill("Tell me about prisms")
    question.locator("button.msg-edit-send").click()
    expect(thread.locator("article.msg-user .msg-body").first).to_have_text(
        "Tell me about prisms"
    )
    page.wait_for_selector("article.msg-assistant.status-complete")
    expect(thread.locator("article.msg-user .version-label").first).to_have_text("2/2")

    # switch back to the first branch; a reload shows the same branch
    thread.locator("article.msg-user button.version-prev").first.click()
    expect(thread.locator("article.msg-user .msg-body").first).to_have_text(
        "Tell me about rainbows"
    )
    page.reload()
    expect(thread.locator("article.msg-user .msg-body").first).to_have_text(
        "Tell me about rainbows"
    )
    expect(thread.locator("article.msg-user .version-label").first).to_have_text("1/2")
    conversation = Conversation.objects.get(user__username=NEWCOMER)
    assert conversation.messages.filter(role="user").count() == 2
    assert conversation.messages.filter(role="assistant").count() == 3

    # rename
    page.click("#chat-menu-button")  # the header's actions are in one menu
    page.fill(".chat-header input[name=title]", "Optics notebook")
    page.click(".chat-header form.rename button[type=submit]")
    expect(page.locator("#conversation-list")).to_contain_text("Optics notebook")
    conversation.refresh_from_db()
    assert conversation.title == "Optics notebook"

    # search finds the renamed chat by its title and by a word of an answer
    page.fill("#search-q", "optics")
    page.press("#search-q", "Enter")
    results = page.locator("li.search-result")
    expect(results.first).to_contain_text("Optics notebook")
    page.fill("#search-q", "bold")
    page.press("#search-q", "Enter")
    expect(page.locator("li.search-result mark").first).to_have_text(
        re.compile("bold", re.I)
    )
    page.screenshot(path=str(SHOTS / "flow-search.png"), full_page=True)
    page.locator("li.search-result a").first.click()
    page.wait_for_selector("#thread article.msg-assistant")
    assert f"/c/{conversation.id}/" in page.url

    # export as JSON, then import the file: a copy with every message
    page.click("#chat-menu-button")
    with page.expect_download() as download:
        page.click("#export-json")
    exported = download.value.path()
    data = json.loads(open(exported, encoding="utf-8").read())
    assert data  # a real file with content
    page.goto(site + "/import/")
    page.set_input_files("input[name=file]", exported)
    page.click("#import-submit")
    page.wait_for_load_state()
    copies = Conversation.objects.filter(user__username=NEWCOMER)
    expect(page.locator("#conversation-list")).to_contain_text("Optics notebook")
    assert copies.count() == 2
    imported = copies.exclude(id=conversation.id).get()
    assert imported.messages.count() == conversation.messages.count() == 5

    # delete the original (with its confirmation step)
    page.goto(f"{site}/c/{conversation.id}/")
    page.click("#chat-menu-button")
    page.click(".chat-header .delete-link")
    page.click("button.danger")
    page.wait_for_selector("#composer")
    assert not Conversation.objects.filter(id=conversation.id).exists()
    assert Conversation.objects.filter(id=imported.id).exists()
    assert not Message.objects.filter(conversation_id=conversation.id).exists()
