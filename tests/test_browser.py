"""The chat page in a real browser (Debian's Chromium driven by Playwright): sign in,
send, watch the answer stream in, stop, regenerate. Screenshots go to .var/screenshots/.

Skipped where Chromium is not installed (`make test` installs it when run as root).
"""

from __future__ import annotations

import re
import shutil

import pytest

from conversations.models import Conversation, Message
from tests.stack import ROOT, running_stack

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.slow,
    pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed"),
]
SHOTS = ROOT / ".var" / "screenshots"
ANSWER = "Here is **bold** text and `code`. "


@pytest.fixture
def site(user):
    args = ["--pool", "default", "--engine", "scripted", "--delay-ms", "40"]
    args += ["--script-text", ANSWER, "--cycle"]
    with running_stack(args, env={"CHAT_MAX_TOKENS": "40"}) as base:
        yield base


@pytest.fixture
def page(site, monkeypatch):
    from playwright.sync_api import sync_playwright

    # Playwright's sync API runs an event loop in this thread; the ORM calls of the
    # assertions are plain sync calls, not async code.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=CHROMIUM,
            args=[
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
            ],
        )
        page = browser.new_page()
        page.set_default_timeout(20_000)
        page.goto(site + "/")
        page.fill("input[name=username]", "alice")
        page.fill("input[name=password]", "pw-alice-123")
        page.click("button[type=submit]")
        page.wait_for_selector("#composer")
        yield page
        browser.close()


def last_answer(page):
    return page.locator("article.msg-assistant").last


def test_answer_streams_into_the_page_then_renders_markdown(page):
    page.fill("#content", "Hello <b>there</b>")
    page.keyboard.press("Enter")
    answer = last_answer(page)
    page.wait_for_selector(
        "article.msg-assistant.status-streaming .msg-body:not(:empty)"
    )
    partial = answer.locator(".msg-body").inner_text()
    page.wait_for_selector("article.msg-assistant.status-complete")
    final_text = answer.locator(".msg-body").inner_text()
    assert len(partial) < len(final_text)  # it was seen growing, not arriving at once
    assert answer.locator(".msg-body strong").count() > 0  # server-rendered Markdown
    assert (
        page.locator("article.msg-user .msg-body").last.inner_text()
        == "Hello <b>there</b>"
    )
    assert re.search(r"/c/[0-9a-f-]{36}/$", page.url)
    assert "Hello <b>there</b>" in page.locator("#conversation-list").inner_text()
    page.screenshot(path=str(SHOTS / "chat-streamed.png"), full_page=True)
    page.reload()
    assert page.locator("article.msg-assistant .msg-body strong").count() > 0
    message = Message.objects.filter(role="assistant").get()
    assert message.status == "complete" and "**bold**" in message.content


def test_stop_keeps_the_partial_answer_and_regenerate_adds_a_version(page):
    page.fill("#content", "Tell me a long story")
    page.click("#send")
    page.wait_for_selector(
        "article.msg-assistant.status-streaming .msg-body:not(:empty)"
    )
    page.click("#stop")
    page.wait_for_selector("article.msg-assistant.status-cancelled")
    assert last_answer(page).locator(".msg-state").inner_text() == "Stopped"
    stopped = Message.objects.get(role="assistant")
    assert stopped.status == "cancelled" and 0 < stopped.token_count < 40
    page.click("#regenerate")
    page.wait_for_selector("article.msg-assistant.status-complete")
    page.screenshot(path=str(SHOTS / "chat-regenerated.png"), full_page=True)
    conversation = Conversation.objects.get()
    roles = list(
        conversation.messages.order_by("created_at").values_list("role", flat=True)
    )
    assert roles == ["user", "assistant", "assistant"]
    page.reload()
    assert "Earlier answers (1)" in page.content()


def test_empty_message_shows_a_clear_error_and_sends_nothing(page):
    page.fill("#content", "   ")
    page.click("#send")
    assert "empty" in page.locator("#composer-error").inner_text()
    assert Message.objects.count() == 0


def test_pressing_enter_repeatedly_sends_one_message(page):
    page.fill("#content", "Only once please")
    for _ in range(3):
        page.keyboard.press("Enter")
    page.wait_for_selector("article.msg-assistant.status-complete")
    assert Conversation.objects.count() == 1
    assert Message.objects.filter(role="user").count() == 1
    assert page.locator("#stop").is_hidden()


def test_a_repeated_question_is_marked_as_a_cached_answer(page, site, user):
    from gateway import services as gateway_services

    gateway_services.user_preference_set(user=user, reuse_cached_answers=True)
    page.fill("#content", "What is a cache?")
    page.keyboard.press("Enter")
    page.wait_for_selector("article.msg-assistant.status-complete")
    assert last_answer(page).locator(".msg-cache").count() == 0
    page.goto(site + "/")  # a new chat, the same question
    page.fill("#content", "What is a cache?")
    page.keyboard.press("Enter")
    page.wait_for_selector("article.msg-assistant.status-complete .msg-cache")
    assert last_answer(page).locator(".msg-cache").inner_text() == "cached answer"
    page.screenshot(path=str(SHOTS / "chat-cached-answer.png"), full_page=True)
    page.reload()
    assert last_answer(page).locator(".msg-cache").inner_text() == "cached answer"
    cached = Message.objects.filter(role="assistant").order_by("created_at").last()
    assert cached.cache_kind == "exact" and cached.content.startswith(ANSWER)
