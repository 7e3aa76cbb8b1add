"""Request-rate limits (django-ratelimit on the Redis cache): message POST per user,
login per IP; a blocked request is a 429 with Retry-After and a clear message."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from conversations.models import Message
from gateway import ratelimits

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
