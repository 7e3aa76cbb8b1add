"""The Content-Security-Policy (settings.CONTENT_SECURITY_POLICY, django-csp): every page
lets the browser load images, scripts and connections from our own
origin only (DESIGN §10)."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from conversations import services
from conversations.models import Message
from memory.models import Document

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("pool_heartbeat")]


def directives(header: str) -> dict[str, list[str]]:
    """Parse a Content-Security-Policy header into {directive: [sources]}."""
    parsed = {}
    for part in header.split(";"):
        name, *sources = part.split()
        parsed[name] = sources
    return parsed


def assert_own_origin_only(header: str) -> None:
    policy = directives(header)
    for name in ("img-src", "script-src", "style-src", "connect-src", "font-src"):
        assert policy[name] == ["'self'"], (name, header)
    assert policy["default-src"] == ["'none'"]
    assert policy["object-src"] == policy["frame-src"] == ["'none'"]
    assert policy["base-uri"] == policy["form-action"] == ["'self'"]


@pytest.fixture
def staff_client(user):
    user.is_staff = user.is_superuser = True
    user.save()
    client = Client()
    client.force_login(user)
    return client


def test_every_page_carries_the_policy(
    staff_client, user, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        turn = services.turn_start(user=user, content="Hi")
    document = Document.objects.create(user=user, title="notes.txt")
    pages = [
        reverse("chat-home"),
        reverse("conversation-detail", args=[turn.conversation.id]),
        reverse("account-settings"),
        reverse("memory-page"),
        reverse("document-list"),
        reverse("document-detail", args=[document.id]),
        reverse("admin:index"),
        reverse("admin:conversations_message_changelist"),
        reverse("admin:conversations_message_change", args=[turn.user_message.id]),
        reverse("admin:auth_user_add"),
    ]
    for url in pages:
        response = staff_client.get(url)
        assert response.status_code == 200, url
        assert_own_origin_only(response.headers["Content-Security-Policy"])
    anonymous = Client()
    for url in (reverse("login"), reverse("signup"), reverse("admin:login")):
        response = anonymous.get(url)
        assert response.status_code == 200, url
        assert_own_origin_only(response.headers["Content-Security-Policy"])


def test_the_answer_stream_carries_the_policy(auth_client, user):
    turn = services.turn_start(user=user, content="Hi")
    Message.objects.filter(id=turn.assistant_message.id).update(
        status=Message.Status.COMPLETE, content="Done."
    )
    url = reverse(
        "message-stream", args=[turn.conversation.id, turn.assistant_message.id]
    )
    response = auth_client.get(url)
    assert response["Content-Type"].startswith("text/event-stream")
    assert_own_origin_only(response.headers["Content-Security-Policy"])
