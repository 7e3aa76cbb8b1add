"""The chat page in Chromium with the real SmolLM2-135M model (llama.cpp) instead of
the scripted engine: a typed question gets an answer that is seen growing, ends
complete with its footer, and is stored exactly as the page assembled it."""

from __future__ import annotations

import pytest

from conversations.models import Message
from tests.browser.conftest import BROWSER_MARKS, SHOTS, last_answer

pytestmark = BROWSER_MARKS


@pytest.mark.parametrize(
    "worker_args", [["--engine", "llamacpp", "--n-ctx", "2048", "--concurrency", "1"]]
)
@pytest.mark.parametrize("site_env", [{"CHAT_MAX_TOKENS": "48"}])
def test_a_real_model_answer_streams_into_the_page_and_is_stored_as_seen(page):
    page.fill("#content", "Name three colours of the rainbow.")
    page.keyboard.press("Enter")
    answer = last_answer(page)
    body = answer.locator(".msg-body")
    page.wait_for_selector(
        "article.msg-assistant.status-streaming .msg-body:not(:empty)", timeout=120_000
    )
    partial = body.inner_text()
    page.wait_for_selector("article.msg-assistant.status-complete", timeout=120_000)
    stored = Message.objects.get(role="assistant")
    assert stored.status == "complete"
    assert stored.model == "SmolLM2-135M-Instruct.Q4_1"
    assert stored.content.strip()
    assert len(partial) < len(body.inner_text())  # seen growing, not at once
    assert body.get_attribute("data-raw") == stored.content
    assert "tokens" in answer.locator(".msg-meta").first.inner_text()
    page.screenshot(path=str(SHOTS / "chat-real-model.png"), full_page=True)
