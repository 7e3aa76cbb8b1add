"""The session's user read (safety/backends.py): the user and their suspension flag
in one query, sessions of the plain ModelBackend still signed in, and a wrong
password checked once."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.signals import user_login_failed
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from safety import suspensions
from safety.backends import SessionUserBackend
from safety.selectors import SUSPENDED_ATTR

pytestmark = pytest.mark.django_db


def test_the_user_is_read_with_their_suspension_flag_in_one_query(user):
    backend = SessionUserBackend()
    with CaptureQueriesContext(connection) as queries:
        read = backend.get_user(str(user.pk))  # the session keeps the id as text
    assert len(queries.captured_queries) == 1
    assert read == user and read.username == user.username
    assert read.password == user.password and read.is_active
    assert getattr(read, SUSPENDED_ATTR) is False
    suspensions.suspension_create(
        user=user,
        until=datetime(2099, 1, 1, tzinfo=UTC),
        reason="Spam",
        actor=None,
        actor_label="test",
    )
    assert getattr(backend.get_user(user.pk), SUSPENDED_ATTR) is True
    suspensions.suspension_lift(user=user, actor=None, actor_label="test")
    assert getattr(backend.get_user(user.pk), SUSPENDED_ATTR) is False


def test_an_unknown_inactive_or_malformed_user_id_reads_no_user(user):
    backend = SessionUserBackend()
    assert backend.get_user(user.pk + 1000) is None
    assert backend.get_user("not-a-number") is None
    user.is_active = False
    user.save()
    assert backend.get_user(user.pk) is None


def test_a_session_signed_in_by_the_plain_model_backend_stays_signed_in(user):
    client = Client()
    client.force_login(user, backend="django.contrib.auth.backends.ModelBackend")
    response = client.get(reverse("chat-home"))
    assert response.status_code == 200
    assert response.wsgi_request.user == user


def test_signing_in_uses_the_backend_that_reads_the_flag(user):
    client = Client()
    response = client.post(
        reverse("login"), {"username": user.username, "password": "pw-alice-123"}
    )
    assert response.status_code == 302, response.content[:300]
    assert client.session["_auth_user_backend"] == "safety.backends.SessionUserBackend"
    assert client.get(reverse("chat-home")).wsgi_request.user == user


def test_a_wrong_password_is_checked_once_and_fails(user, monkeypatch):
    checks: list[str] = []
    plain = ModelBackend.authenticate

    def counted(self, *args, **kwargs):
        checks.append(type(self).__name__)
        return plain(self, *args, **kwargs)

    monkeypatch.setattr(ModelBackend, "authenticate", counted)
    failed: list[dict] = []

    def on_failed(sender, credentials, **kwargs):
        failed.append(credentials)

    user_login_failed.connect(on_failed)
    try:
        response = Client().post(
            reverse("login"), {"username": user.username, "password": "wrong"}
        )
    finally:
        user_login_failed.disconnect(on_failed)
    assert response.status_code == 200  # the form again, with its error
    assert checks == ["SessionUserBackend"]
    assert len(failed) == 1
