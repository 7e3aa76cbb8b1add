"""Request-rate limits (django-ratelimit on the Redis cache): message POST per user,
login per IP; a blocked request is a 429 with Retry-After and a clear message; a
session refused once is refused before Django runs until the window ends."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from conversations.models import Message
from gateway import ratelimits
from inference.connections import redis_sync
from tests.sse import session_cookie

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("pool_heartbeat")]


def test_message_posts_are_limited_per_user(settings, auth_client, other_user):
    settings.CHAT_MESSAGE_RATE = "2/m"
    url = reverse("message-send-new")
    assert auth_client.post(url, {"content": "one"}).status_code == 201
    assert auth_client.post(url, {"content": "two"}).status_code == 201
    blocked = auth_client.post(url, {"content": "three"})
    assert blocked.status_code == 429
    assert blocked["Retry-After"] == "60"
    error = blocked.json()["error"]
    assert error["code"] == "rate_limited" and "Too many messages" in error["message"]
    assert Message.objects.filter(content="three").count() == 0
    other = Client()
    other.force_login(other_user)
    assert other.post(url, {"content": "mine"}).status_code == 201


def test_login_attempts_are_limited_per_ip(settings, user):
    settings.LOGIN_RATE = "2/m"
    url = reverse("login")
    wrong = {"username": "alice", "password": "nope"}
    client = Client(REMOTE_ADDR="10.0.0.1")
    assert client.post(url, wrong).status_code == 200
    assert client.post(url, wrong).status_code == 200
    blocked = client.post(url, {"username": "alice", "password": "pw-alice-123"})
    assert blocked.status_code == 429
    assert "Too many sign-in attempts" in blocked.content.decode()
    assert blocked["Retry-After"] == "60"
    assert client.get(url).status_code == 200  # only POSTs count
    elsewhere = Client(REMOTE_ADDR="10.0.0.2")
    ok = elsewhere.post(url, {"username": "alice", "password": "pw-alice-123"})
    assert ok.status_code == 302


@pytest.mark.parametrize(
    "rate, seconds", [("10/m", 60), ("5/s", 1), ("3/5m", 300), ("100/h", 3600)]
)
def test_rate_period(rate, seconds):
    assert ratelimits.rate_period_s(rate) == seconds


async def _asgi_post(path: str, cookie: str) -> tuple[int, dict[str, str], bytes]:
    """POST ``path`` (a message) through ``chatsite.asgi.application``; return
    (status, headers, body)."""
    from chatsite.asgi import application

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"host", b"testserver"),
            (b"cookie", cookie.encode()),
            (b"accept", b"application/json"),
            (b"content-type", b"application/x-www-form-urlencoded"),
        ],
        "client": ("127.0.0.1", 50000),
        "server": ("testserver", 80),
    }
    sent: dict[str, Any] = {"headers": {}, "body": b""}

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"content=again", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            sent["status"] = message["status"]
            sent["headers"] = {k.decode(): v.decode() for k, v in message["headers"]}
        else:
            sent["body"] += message.get("body", b"")

    await application(scope, receive, send)
    return sent["status"], sent["headers"], sent["body"]


def _site_spy(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Replace the site's Django handlers (sync and async views) with one that answers
    204 and records the paths it was given (whatever reaches it ran the middleware
    chain)."""
    from chatsite import asgi

    reached: list[str] = []

    async def site(scope: dict[str, Any], receive: Any, send: Any) -> None:
        reached.append(scope["path"])
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    monkeypatch.setattr(asgi, "site_app", site)
    monkeypatch.setattr(asgi, "sync_site_app", site)
    return reached


@pytest.mark.parametrize(
    "view, args",
    [("message-send-new", []), ("message-send", [uuid.uuid4()])],
)
def test_a_refused_session_is_refused_before_django_until_the_window_ends(
    settings, auth_client, monkeypatch, view, args
):
    """After django-ratelimit refused a message POST, the session's next message POSTs
    get the same 429 (Retry-After, JSON error) from the ASGI router: Django's handler
    (middleware, session and user queries) never runs for them, and nothing is
    stored. The mark lasts until the library's window ends, no longer."""
    settings.CHAT_MESSAGE_RATE = "1/m"
    url = reverse("message-send-new")
    assert auth_client.post(url, {"content": "one"}).status_code == 201
    library = auth_client.post(url, {"content": "two"})
    assert library.status_code == 429
    reached = _site_spy(monkeypatch)
    target = reverse(view, args=args)
    status, headers, body = asyncio.run(_asgi_post(target, session_cookie(auth_client)))
    assert reached == []
    assert status == 429
    assert headers["retry-after"] == library["Retry-After"] == "60"
    assert json.loads(body) == library.json()
    assert json.loads(body)["error"]["code"] == "rate_limited"
    assert Message.objects.filter(content="again").count() == 0
    session_key = auth_client.session.session_key
    key = ratelimits.refused_key(
        group=ratelimits.MESSAGE_GROUP, session_key=session_key
    )
    assert 0 < redis_sync().ttl(key) <= 60
    assert session_key not in key


def test_other_sessions_and_other_requests_still_reach_django(
    settings, auth_client, user, other_user, monkeypatch
):
    """The mark is per refused session and per limited view: another user, a second
    session of the same user (until the library refuses it too), a GET of the chat
    page and an unlimited POST of the refused session all go to Django."""
    settings.CHAT_MESSAGE_RATE = "1/m"
    url = reverse("message-send-new")
    assert auth_client.post(url, {"content": "one"}).status_code == 201
    assert auth_client.post(url, {"content": "two"}).status_code == 429
    other = Client()
    other.force_login(other_user)
    second_tab = Client()
    second_tab.force_login(user)
    reached = _site_spy(monkeypatch)
    for cookie in (session_cookie(other), session_cookie(second_tab)):
        status, _, _ = asyncio.run(_asgi_post(url, cookie))
        assert status == 204
    status, _, _ = asyncio.run(
        _asgi_post(reverse("logout"), session_cookie(auth_client))
    )
    assert status == 204
    assert reached == [url, url, reverse("logout")]


def test_without_a_session_cookie_nothing_is_looked_up(monkeypatch):
    """An anonymous POST goes to Django (the login redirect), unmarked."""
    reached = _site_spy(monkeypatch)
    status, _, _ = asyncio.run(_asgi_post(reverse("message-send-new"), ""))
    assert status == 204 and reached == ["/c/messages/"]


@pytest.mark.parametrize(
    ("rate", "words"),
    [
        ("30/m", "30 per minute"),
        ("10/5m", "10 per 5 minutes"),
        ("5/s", "5 per second"),
        ("100/h", "100 per hour"),
        ("1000/d", "1000 per day"),
    ],
)
def test_a_refusal_names_the_rate_in_words(rate, words):
    assert ratelimits.rate_describe(rate) == words


# --- the per-account sign-in lockout --------------------------------------------------


def _sign_in(password: str, *, username: str = "alice", ip: str) -> Any:
    return Client(REMOTE_ADDR=ip).post(
        reverse("login"), {"username": username, "password": password}
    )


def test_an_account_is_locked_after_failed_sign_ins_from_many_addresses(settings, user):
    """Five wrong passwords for one account, each from another address (so the
    per-IP limit never fires): the sixth attempt is refused even with the right
    password, with a message that says to wait, and nobody is signed in."""
    settings.LOGIN_RATE = "1000/m"
    settings.LOGIN_ACCOUNT_FAILURES = 5
    for i in range(5):
        assert _sign_in("wrong", ip=f"10.1.0.{i}").status_code == 200
    locked = _sign_in("pw-alice-123", ip="10.1.0.99")
    assert locked.status_code == 200  # the form again, with the lockout message
    assert "sign-in is paused for 1 minute" in locked.content.decode()
    assert "_auth_user_id" not in locked.client.session
    other = _sign_in("pw-mallory-123", username="mallory", ip="10.1.0.99")
    assert other.status_code == 200  # no such user here: the usual error, unlocked
    assert "paused" not in other.content.decode()


def test_the_lockout_backs_off_and_a_success_clears_it(settings, user):
    settings.LOGIN_ACCOUNT_FAILURES = 2
    settings.LOGIN_LOCKOUT_BASE_S = 60
    settings.LOGIN_LOCKOUT_MAX_S = 200
    assert ratelimits.login_failure_record(username="alice") == 0
    assert ratelimits.login_failure_record(username="Alice") == 60  # one account
    assert ratelimits.login_failure_record(username="alice") == 120
    assert ratelimits.login_failure_record(username="alice") == 200  # the cap
    assert 0 < ratelimits.login_locked_for(username="ALICE") <= 200
    ratelimits.login_failures_clear(username="alice")
    assert ratelimits.login_locked_for(username="alice") == 0
    assert _sign_in("pw-alice-123", ip="10.2.0.1").status_code == 302


def test_an_unknown_username_is_locked_with_the_same_words(settings, db):
    """No user enumeration: a name no account has is counted and locked the same."""
    settings.LOGIN_RATE = "1000/m"
    settings.LOGIN_ACCOUNT_FAILURES = 2
    for i in range(2):
        _sign_in("wrong", username="nobody", ip=f"10.3.0.{i}")
    locked = _sign_in("wrong", username="nobody", ip="10.3.0.9")
    assert "sign-in is paused for 1 minute" in locked.content.decode()
