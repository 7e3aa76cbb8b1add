"""A new message's answer streams in the response of the POST that sends it
(static/posted-stream.js, conversations.sse.turn_stream_response): no second request
before the first token (issue 13); when that response breaks off mid-answer, the page
goes on from the stream URL with the last event id, losing and repeating nothing."""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest

from conversations.models import Message
from tests.browser.conftest import BROWSER_MARKS, last_answer
from tests.faults import TcpProxy

pytestmark = BROWSER_MARKS

STREAMING = "article.msg-assistant.status-streaming"


def _script_ready(page) -> None:
    # page.wait_for_function polls a string with eval, which the site's CSP refuses
    # when the first check is false; the scripts have run once "load" has fired
    page.wait_for_load_state("load")
    assert page.evaluate("window.ChatPostedStream !== undefined")


def _send(page, text: str) -> None:
    page.fill("#content", text)
    page.keyboard.press("Enter")


def test_a_new_message_streams_in_its_post_without_a_second_request(page, browser_log):
    _script_ready(page)
    _send(page, "Hello")
    page.wait_for_selector("article.msg-assistant.status-complete")
    answer = Message.objects.get(role="assistant")
    assert last_answer(page).locator(".msg-body").get_attribute("data-raw") == (
        answer.content
    )
    assert not [url for url in browser_log.requests if "/stream/" in url]


@pytest.mark.parametrize("worker_args", [["--delay-ms", "80"]])
def test_a_post_stream_that_breaks_off_goes_on_from_the_stream_url(
    page, site, browser_log
):
    proxy = TcpProxy(urlsplit(site).port)
    try:
        # the session cookie is the host's, whatever the port
        page.goto(f"http://127.0.0.1:{proxy.port}/")
        _script_ready(page)
        _send(page, "Tell me a long story")
        page.wait_for_selector(f"{STREAMING} .msg-body:not(:empty)")
        proxy.cut()  # the POST's connection is reset mid-answer
        proxy.restore()
        page.wait_for_selector("article.msg-assistant.status-complete")
    finally:
        proxy.close()
    answer = Message.objects.get(role="assistant")
    assert answer.token_count == 40  # the whole answer: CHAT_MAX_TOKENS
    raw = last_answer(page).locator(".msg-body").get_attribute("data-raw")
    assert raw == answer.content  # nothing lost or repeated across the break
    resumed = [url for url in browser_log.requests if "/stream/" in url]
    assert resumed and "last_event_id=" in resumed[0]
