"""End to end as deployed: `daphne` and `manage.py run_inference_worker` (llama.cpp, real
SmolLM2) as separate processes, a browser-like HTTP client logging in, posting a message
with its CSRF token and reading the answer over SSE."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from django.conf import settings
from django.db import connection

from conversations.models import Message
from inference import client as inference_client
from tests.sse import parse_frames

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]
ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def stack(user):
    db = connection.settings_dict
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "chatsite.settings.test",
        "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
        "TEST_REDIS_URL": settings.REDIS_URL,
        "HF_HUB_OFFLINE": "1",
        "PYTHONUNBUFFERED": "1",
    }
    port = free_port()
    bin_dir = Path(sys.executable).parent
    procs = [
        subprocess.Popen(
            [
                bin_dir / "daphne",
                "-b",
                "127.0.0.1",
                "-p",
                str(port),
                "chatsite.asgi:application",
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        ),
        subprocess.Popen(
            [
                sys.executable,
                "manage.py",
                "run_inference_worker",
                "--pool",
                "default",
                "--engine",
                "llamacpp",
                "--n-ctx",
                "2048",
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        ),
    ]
    base = f"http://127.0.0.1:{port}"
    deadline = time.time() + 60
    while True:
        try:
            httpx.get(base + "/login/", timeout=1)
            break
        except httpx.HTTPError:
            if time.time() > deadline or any(p.poll() is not None for p in procs):
                raise RuntimeError("daphne did not start") from None
            time.sleep(0.2)
    # the gateway admits a request only to a pool with a live worker (issue #4)
    while inference_client.workers_live(pool="default") == 0:
        if time.time() > deadline + 60 or any(p.poll() is not None for p in procs):
            raise RuntimeError("the inference worker did not start")
        time.sleep(0.2)
    yield base
    for p in procs:
        p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()


def test_login_send_and_stream_an_answer_through_daphne_and_a_worker_process(stack):
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
