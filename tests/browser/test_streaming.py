"""Streaming that reads well (issue 11), in a real browser: Markdown renders while the
answer streams (markdown-it + DOMPurify, no CSP violation), the text rebuilt from the
stream equals the stored answer byte for byte, a queued answer shows its place in the
queue, a cut-short answer offers Continue (which extends it in place), Esc stops, the footer is filled from
``done`` after re-joining, and the end of an answer is announced once.

Selectors the combined flow uses: ``.msg-queue``, ``.msg-cut``, ``button.msg-continue``.
"""

from __future__ import annotations

import time

import pytest
from playwright.sync_api import expect

from conversations.models import Message
from inference import client as inference_client
from inference import protocol
from tests.browser.conftest import BROWSER_MARKS, SHOTS, last_answer

pytestmark = BROWSER_MARKS

RICH = (
    "Intro with **bold** words.\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n"
    "More text follows here, slowly, word by word. "
)
STREAMING = "article.msg-assistant.status-streaming"


def _send(page, text: str) -> None:
    page.fill("#content", text)
    page.keyboard.press("Enter")


# An answer's footer as the reader sees it, in order: each shown part's msg-* class
# and text (the meta line's numbers are formatted the same way live and rendered).
FOOTER_JS = """footer => [...footer.children]
    .filter(e => e.textContent.trim() && getComputedStyle(e).display !== "none")
    .map(e => [[...e.classList].find(c => c.startsWith("msg-")), e.textContent.trim()])"""


def _footer(answer) -> list[list[str]]:
    return answer.locator(".msg-footer").evaluate(FOOTER_JS)


@pytest.mark.parametrize("script_text", [RICH])
@pytest.mark.parametrize("worker_args", [["--delay-ms", "80"]])
def test_markdown_renders_while_the_answer_streams_with_no_csp_violation(
    page, browser_log
):
    _send(page, "Show me a table")
    page.wait_for_selector(f"{STREAMING} .msg-body strong")
    page.wait_for_selector(f"{STREAMING} .msg-body table td")
    assert "**" not in last_answer(page).locator(".msg-body").inner_text()
    page.screenshot(path=str(SHOTS / "streaming-markdown.png"), full_page=True)
    page.wait_for_selector("article.msg-assistant.status-complete")
    body = last_answer(page).locator(".msg-body")
    assert body.locator("table").count() > 0 and body.locator("strong").count() > 0
    assert browser_log.csp_violations == [], "\n".join(browser_log.csp_violations)


@pytest.mark.parametrize(
    "script_text",
    [
        "One line\nand the next\nand more. ",
        "A paragraph.\n\nAnother paragraph.\n\n",
        "Windows\r\nline\r\nendings. ",
        "| col | val |\n|:---|---:|\n| x | 1 |\n| y | 2 |\n\n",
        "```python\nprint('hi')\n\n    indented()\n```\n\n",
    ],
    ids=["newline", "blank-line", "crlf", "table", "code-fence"],
)
def test_the_streamed_text_equals_the_stored_answer_byte_for_byte(page, script_text):
    _send(page, "Say it")
    page.wait_for_selector("article.msg-assistant.status-complete")
    message = Message.objects.get(role="assistant")
    assert script_text in message.content  # the engine's text reached the answer
    raw = last_answer(page).locator(".msg-body").get_attribute("data-raw")
    assert raw == message.content


@pytest.mark.parametrize("site_env", [{"CHAT_MAX_TOKENS": "12"}])
def test_a_cut_short_answer_says_so_and_continue_extends_it_in_place(page):
    _send(page, "Write a lot")
    page.wait_for_selector("article.msg-assistant.status-complete")
    answer = last_answer(page)
    expect(answer.locator(".msg-cut")).to_have_text(
        "Cut short — the answer reached its length limit"
    )
    expect(page.locator("#answer-status")).to_contain_text("Answer cut short:")
    first = Message.objects.get(role="assistant")
    shown = answer.locator(".msg-body").inner_text()
    answer.locator("button.msg-continue").click()
    # the same bubble streams on: its text so far stays, the new text follows
    page.wait_for_selector(STREAMING)
    assert page.locator("article.msg-assistant").count() == 1
    assert answer.locator(".msg-body").inner_text().startswith(shown[:20])
    page.wait_for_selector("article.msg-assistant.status-complete")
    assert page.locator("article.msg-assistant").count() == 1
    assert page.locator("article.msg-user").count() == 1  # no "Continue" message
    stored = Message.objects.get(role="assistant")
    assert stored.id == first.id
    assert stored.content.startswith(first.content)
    assert len(stored.content) > len(first.content)
    assert stored.token_count == 24  # 12 + 12, both cut at the limit
    assert [m.content for m in Message.objects.filter(role="user")] == ["Write a lot"]
    raw = answer.locator(".msg-body").get_attribute("data-raw")
    assert raw == stored.content  # what the bubble holds is the whole stored answer
    assert answer.locator("button.msg-continue").count() == 1  # cut again: once more
    live = _footer(answer)
    assert [part[0] for part in live] == ["msg-cut", "msg-continue", "msg-meta"]
    page.reload()
    assert page.locator("article.msg-assistant").count() == 1
    assert page.locator("article.msg-assistant .msg-cut").count() == 1
    assert last_answer(page).locator("button.msg-continue").count() == 1
    assert _footer(last_answer(page)) == live  # one layout, live and rendered
    page.screenshot(path=str(SHOTS / "streaming-cut-short.png"), full_page=True)


@pytest.mark.parametrize("worker_args", [["--first-delay-ms", "2500"]])
def test_the_page_says_it_reads_the_conversation_until_the_first_token(page):
    _send(page, "A follow-up in a long conversation")
    answer = last_answer(page)
    # the worker took the job and reads the prompt: said between queue and answer
    expect(answer.locator(".msg-queue")).to_have_text("Reading the conversation…")
    assert answer.locator(".msg-body").inner_text() == ""
    page.wait_for_selector(f"{STREAMING} .msg-body:not(:empty)")
    expect(answer.locator(".msg-queue")).to_have_count(0)  # replaced by the answer
    page.wait_for_selector("article.msg-assistant.status-complete")
    assert answer.locator(".msg-queue").count() == 0


@pytest.mark.parametrize("worker_args", [["--delay-ms", "100"]])
def test_escape_stops_the_streaming_answer(page):
    _send(page, "Tell me a long story")
    page.wait_for_selector(f"{STREAMING} .msg-body:not(:empty)")
    page.keyboard.press("Escape")
    page.wait_for_selector("article.msg-assistant.status-cancelled")
    answer = last_answer(page)
    assert answer.locator(".msg-state").inner_text() == "Stopped"
    assert answer.locator(".msg-cut").count() == 0  # stopped, not cut short
    expect(page.locator("#answer-status")).to_have_text("Answer stopped.")
    stopped = Message.objects.get(role="assistant")
    assert stopped.status == "cancelled" and stopped.token_count < 40
    # the footer reads as it does after a reload: state, Continue, then the model line
    live = _footer(answer)
    assert [part[0] for part in live] == ["msg-state", "msg-continue", "msg-meta"]
    page.reload()
    answer = last_answer(page)
    assert _footer(answer) == live
    # a stopped answer can be continued in place, from what it shows
    shown = answer.locator(".msg-body").inner_text()
    answer.locator("button.msg-continue").click()
    page.wait_for_selector("article.msg-assistant.status-complete")
    assert page.locator("article.msg-assistant").count() == 1
    assert answer.locator(".msg-state").inner_text() == ""
    continued = Message.objects.get(role="assistant")
    assert continued.id == stopped.id and continued.status == "complete"
    assert continued.content.startswith(stopped.content)
    assert continued.token_count > stopped.token_count
    assert answer.locator(".msg-body").inner_text().startswith(shown.strip()[:10])


@pytest.mark.parametrize("worker_args", [["--delay-ms", "100"]])
def test_the_footer_is_filled_from_done_after_leaving_and_coming_back(page, site):
    _send(page, "First question")
    page.wait_for_selector(f"{STREAMING} .msg-body:not(:empty)")
    conversation_url = page.url
    page.goto(site + "/")  # leave mid-answer
    page.goto(conversation_url)  # and come back: the page re-joins the stream
    page.wait_for_selector(f"{STREAMING} .msg-body:not(:empty)")
    page.wait_for_selector("article.msg-assistant.status-complete")
    message = Message.objects.get(role="assistant")
    meta = last_answer(page).locator(".msg-meta").first
    expect(meta).to_have_text(
        f"{message.model} · {message.token_count} tokens"
        f" · first token {message.ttft_ms} ms"
    )
    assert message.ttft_ms is not None
    _send(page, "Second question")
    page.wait_for_selector(f"{STREAMING} .msg-body:not(:empty)")
    page.reload()  # a reload mid-answer
    page.wait_for_selector("article.msg-assistant.status-complete >> nth=1")
    second = Message.objects.filter(role="assistant").order_by("created_at").last()
    expect(last_answer(page).locator(".msg-meta").first).to_have_text(
        f"{second.model} · {second.token_count} tokens · first token {second.ttft_ms} ms"
    )
    raw = last_answer(page).locator(".msg-body").get_attribute("data-raw")
    assert raw == second.content  # rebuilt from the stream's start after the reload


@pytest.mark.parametrize("worker_args", [["--concurrency", "1"]])
def test_a_queued_answer_shows_its_place_until_a_worker_takes_it(page):
    """One worker slot, busy with a slow job: the answer shows "Waiting for a free
    worker…" with its position, which disappears when the answer starts."""
    now = time.time()
    ahead = protocol.Job(
        job_id=protocol.new_job_id(),
        messages=[{"role": "user", "content": "slow"}],
        params={"max_tokens": 40, "script": {"delay_ms": 150}},
        enqueued_at=now,
        deadline=now + 60,
    )
    inference_client.job_enqueue(pool="default", job=ahead)
    deadline = time.monotonic() + 20
    while not inference_client.generation_events(job_id=ahead.job_id):
        assert time.monotonic() < deadline, "the worker did not take the slow job"
        time.sleep(0.05)
    _send(page, "Am I next?")
    queue = page.locator("article.msg-assistant .msg-queue")
    expect(queue).to_have_text("Waiting for a free worker… position 1 in the queue")
    page.screenshot(path=str(SHOTS / "streaming-queued.png"), full_page=True)
    page.wait_for_selector(f"{STREAMING} .msg-body:not(:empty)")
    assert queue.count() == 0  # gone once the answer started
    page.wait_for_selector("article.msg-assistant.status-complete")
    assert queue.count() == 0


def test_the_message_box_has_a_label_and_the_thread_does_not_read_every_token(page):
    label = page.locator("label[for=content]")
    assert label.inner_text() == "Message"
    assert page.locator("#thread").get_attribute("aria-live") is None
    status = page.locator("#answer-status")
    assert status.get_attribute("aria-live") == "polite"
    _send(page, "Hello")
    page.wait_for_selector(f"{STREAMING} .msg-body:not(:empty)")
    assert status.inner_text() == ""  # nothing announced while it streams
    page.wait_for_selector("article.msg-assistant.status-complete")
    expect(status).to_contain_text("Here is bold text and code.")


@pytest.mark.parametrize("worker_args", [["--delay-ms", "100"]])
def test_a_double_click_on_send_sends_once_and_does_not_stop_the_answer(page):
    # Stop takes Send's place once the message is sent: the double-click's second
    # click lands on it and must not stop the answer it just asked for.
    page.fill("#content", "Tell me a story")
    page.dblclick("#send")
    page.wait_for_selector("article.msg-assistant.status-complete")
    [answer] = Message.objects.filter(role="assistant")
    assert answer.status == "complete" and answer.token_count > 0
    assert Message.objects.filter(role="user").count() == 1
    # a deliberate Stop a moment later still stops
    page.fill("#content", "And another one")
    page.click("#send")
    page.wait_for_selector(f"{STREAMING} .msg-body:not(:empty)")
    page.click("#stop")
    page.wait_for_selector("article.msg-assistant.status-cancelled")


def test_stop_pressed_before_the_answer_appears_stops_it(page):
    # Stop shows as soon as the message is sent; pressed before the POST answered
    # (no stop URL yet), it is sent once the answer's stream starts.
    page.fill("#content", "Tell me a long story")
    page.evaluate(
        "() => { document.getElementById('send').click();"
        " document.getElementById('stop').click(); }"
    )
    page.wait_for_selector("article.msg-assistant.status-cancelled")
    stopped = Message.objects.get(role="assistant")
    assert stopped.status == "cancelled" and stopped.token_count < 40
    expect(page.locator("#content")).to_have_value("")
