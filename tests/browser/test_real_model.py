"""The chat page in Chromium with the real SmolLM2-135M model (llama.cpp) instead of
the scripted engine: a typed question gets an answer that is seen growing, ends
complete with its footer, and is stored exactly as the page assembled it."""

from __future__ import annotations

import pytest

from conversations.models import Message
from tests.browser.conftest import BROWSER_MARKS, SHOTS, last_answer

pytestmark = BROWSER_MARKS

# Records, on every change of the page, the newest answer's body length while it is
# streaming. SmolLM2 on two cores can finish a short answer in ~300 ms, a handful of
# 50 ms frames: polling for a "streaming and not empty" state from Python can miss
# that window, an observer in the page cannot.
WATCH_GROWTH = """() => {
  window.streamedLengths = [];
  new MutationObserver(() => {
    const answer = [...document.querySelectorAll("article.msg-assistant")].pop();
    if (answer && answer.classList.contains("status-streaming")) {
      window.streamedLengths.push(answer.querySelector(".msg-body").textContent.length);
    }
  }).observe(document.body, {subtree: true, childList: true, characterData: true, attributes: true});
}"""


@pytest.mark.parametrize(
    "worker_args", [["--engine", "llamacpp", "--n-ctx", "2048", "--concurrency", "1"]]
)
@pytest.mark.parametrize("site_env", [{"CHAT_MAX_TOKENS": "64"}])
def test_a_real_model_answer_streams_into_the_page_and_is_stored_as_seen(page):
    page.evaluate(WATCH_GROWTH)
    page.fill("#content", "Name three colours of the rainbow.")
    page.keyboard.press("Enter")
    answer = last_answer(page)
    body = answer.locator(".msg-body")
    page.wait_for_selector("article.msg-assistant.status-complete", timeout=120_000)
    stored = Message.objects.get(role="assistant")
    assert stored.status == "complete"
    assert stored.model == "SmolLM2-135M-Instruct.Q4_1"
    assert stored.content.strip()
    # seen growing, not at once: at least two partial texts shown before the end
    partial = {n for n in page.evaluate("window.streamedLengths") if n > 0}
    assert len(partial) >= 2, partial
    assert min(partial) < len(body.inner_text())
    assert body.get_attribute("data-raw") == stored.content
    assert "tokens" in answer.locator(".msg-meta").first.inner_text()
    page.screenshot(path=str(SHOTS / "chat-real-model.png"), full_page=True)
