"""End to end as deployed: the web process (uvicorn) and `manage.py run_inference_worker`
(llama.cpp, real SmolLM2) as separate processes, a browser-like HTTP client logging in, posting a message
with its CSRF token and reading the answer over SSE."""

from __future__ import annotations

import time

import httpx
import pytest

from conversations.models import Message
from tests.sse import parse_frames
from tests.stack import running_stack

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


@pytest.fixture
def stack(user):
    with running_stack(
        ["--pool", "default", "--engine", "llamacpp", "--n-ctx", "2048"]
    ) as base:
        yield base


def test_login_send_and_stream_an_answer_through_the_web_process_and_a_worker_process(
    stack,
):
    with httpx.Client(base_url=stack, follow_redirects=False, timeout=30) as browser:
        browser.get("/login/")
        token = browser.cookies["csrftoken"]
        login = browser.post(
            "/login/",
            data={
                "username": "alice",
                "password": "pw-alice-123",
                "csrfmiddlewaretoken": token,
            },
            headers={"Referer": stack + "/login/"},
        )
        assert login.status_code == 302
        page = browser.get("/")
        assert page.status_code == 200 and "composer" in page.text
        token = browser.cookies["csrftoken"]
        sent = time.monotonic()
        response = browser.post(
            "/c/messages/",
            data={"content": "Say hello in one short sentence."},
            headers={"X-CSRFToken": token, "Referer": stack + "/"},
        )
        assert response.status_code == 201, response.text
        turn = response.json()
        events, first_token_at, buffer = [], None, ""
        with browser.stream(
            "GET", turn["assistant_message"]["stream_url"], timeout=120
        ) as stream:
            assert stream.headers["content-type"] == "text/event-stream"
            for chunk in stream.iter_text():
                buffer += chunk
                new, _comments, buffer = parse_frames(buffer)
                for event in new:
                    if event.event == "token" and first_token_at is None:
                        first_token_at = time.monotonic()
                events.extend(new)
                if any(e.event in ("done", "error") for e in events):
                    break
    tokens = [e for e in events if e.event == "token"]
    assert len(tokens) > 1
    assert events[-1].event == "done", events[-1]
    assert first_token_at is not None and first_token_at - sent < 30
    answer = Message.objects.get(id=turn["assistant_message"]["id"])
    assert answer.status == Message.Status.COMPLETE
    assert answer.content == "".join(e.data["t"] for e in tokens)
    assert answer.token_count > 0 and answer.prompt_tokens > 0
