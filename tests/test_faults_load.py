"""Fault drills under load (issue 13): 100 concurrent turns in one conversation from
two tabs, and a request flood from one user. In-process (the test client and the ASGI
relay) with a real scripted worker thread; figures of the flood's effect on other
users' time to first token come from bench/flood.py."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection
from django.test import Client
from django.urls import reverse

from conversations.models import Conversation, Message
from inference.engines.scripted import ScriptedEngine
from tests.conftest import fake_heartbeat, make_user
from tests.sse import asgi_sse, ended, session_cookie

TURNS = 100
ANSWER = "fine thanks"


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_100_concurrent_turns_from_two_tabs_are_each_stored_once_or_not_at_all(
    user, settings, start_worker
):
    """Two tabs (two sessions of one user) post 100 messages at once into one
    conversation; a tab whose message is accepted reads its answer to the end, as the
    page does. What each tab sees: 201 (then the answer) or 409 "an answer is still
    being written", nothing else. Stored: every accepted question exactly once with
    its one answer right after it (complete), no rejected question, no duplicate."""
    settings.CHAT_MESSAGE_RATE = "100000/m"
    start_worker(ScriptedEngine(text=ANSWER, delay_ms=2))
    conv = Conversation.objects.create(user=user, title="busy")
    tabs = []
    for _ in range(2):
        tab = Client(raise_request_exception=False)
        tab.force_login(user)
        tabs.append(tab)
    url = reverse("message-send", args=[conv.id])
    lock = threading.Lock()
    outcomes: dict[str, int] = {}

    def post(i: int) -> None:
        tab = tabs[i % 2]
        content = f"turn {i}"
        response = tab.post(url, {"content": content}, HTTP_ACCEPT="application/json")
        with lock:
            outcomes[content] = response.status_code
        if response.status_code == 201:
            stream_url = response.json()["assistant_message"]["stream_url"]
            result = asyncio.run(
                asgi_sse(stream_url, cookie=session_cookie(tab), stop_when=ended)
            )
            assert result.last("done") is not None, result.events
        else:
            error = response.json()["error"]
            assert response.status_code == 409 and error["message"], error
        connection.close()

    with ThreadPoolExecutor(max_workers=16) as pool:
        for future in [pool.submit(post, i) for i in range(TURNS)]:
            future.result()
    statuses = Counter(outcomes.values())
    assert set(statuses) <= {201, 409} and sum(statuses.values()) == TURNS, statuses
    accepted = {c for c, s in outcomes.items() if s == 201}
    assert accepted
    thread = list(Message.objects.filter(conversation=conv).order_by("created_at"))
    questions = [m for m in thread if m.role == Message.Role.USER]
    assert sorted(m.content for m in questions) == sorted(accepted)
    assert len(thread) == 2 * len(accepted)
    for question, answer in zip(thread[::2], thread[1::2], strict=True):
        assert question.role == Message.Role.USER
        assert answer.role == Message.Role.ASSISTANT
        assert answer.parent_id == question.id
        assert answer.status == Message.Status.COMPLETE and answer.content == ANSWER


@pytest.mark.django_db
def test_a_flood_from_one_user_is_429_with_retry_after_and_others_are_served(
    user, settings
):
    """One user sends 300 messages as fast as the client can: the first
    CHAT_MESSAGE_RATE (30 a minute) are accepted, every other one is a 429 with
    Retry-After and a JSON error saying how long to wait, storing nothing; another
    user sending at the same time is served (201)."""
    settings.CHAT_MESSAGE_RATE = "30/m"
    fake_heartbeat()  # admitted without a worker: this drill is about the edge
    flooder = Client()
    flooder.force_login(user)
    other = Client()
    other.force_login(make_user("bystander"))
    url = reverse("message-send-new")
    statuses: Counter[int] = Counter()
    other_statuses = []
    for i in range(300):
        response = flooder.post(url, {"content": f"spam {i}"})
        statuses[response.status_code] += 1
        if response.status_code == 429:
            assert int(response["Retry-After"]) > 0
            assert response.json()["error"]["code"] == "rate_limited"
        if i % 100 == 50:
            other_statuses.append(
                other.post(url, {"content": f"hello {i}"}).status_code
            )
    assert statuses == {201: 30, 429: 270}, statuses
    assert other_statuses == [201, 201, 201]
    assert Message.objects.filter(conversation__user=user).count() == 2 * 30
