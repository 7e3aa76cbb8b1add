"""A suspended user writes nothing (safety/middleware.py): every writing URL of the
URLconf (tests/urlwalk.py) with every writing method is a 403 ``account_suspended``,
except the few that end, secure or delete (ALLOWED_WHILE_SUSPENDED); nothing is
stored and nothing costs compute. Reading still works."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.apps import apps
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse

from memory.models import Document, MemoryFact
from safety import suspensions
from safety.middleware import ALLOWED_WHILE_SUSPENDED
from tests.test_url_ownership import VALID_FORM, owned  # noqa: F401 - a fixture
from tests.urlwalk import routes, url_fill

pytestmark = pytest.mark.django_db

METHODS = ("post", "put", "patch", "delete")
UNTIL = datetime(2099, 1, 2, tzinfo=UTC)


def _stored() -> dict[str, int]:
    return {
        model._meta.label: model.objects.count()
        for model in apps.get_models()
        if model._meta.app_label not in ("sessions", "audit")
    }


def _suspend(user) -> None:
    suspensions.suspension_create(
        user=user, until=UNTIL, reason="Spam", actor=None, actor_label="test"
    )


def test_a_suspended_user_is_refused_on_every_writing_url_and_nothing_is_stored(
    owned,  # noqa: F811
    pool_heartbeat,
    enqueued,
):
    user = owned["user"]
    _suspend(user)
    client = Client(raise_request_exception=False)
    before = _stored()
    walked = 0
    for route in routes():
        if route.is_admin or route.name in ALLOWED_WHILE_SUSPENDED:
            continue
        path = url_fill(route, owned["values"])
        for method in METHODS:
            client.force_login(user)
            response = getattr(client, method)(path, VALID_FORM)
            where = f"{method.upper()} {path} ({route.name or route.text})"
            walked += 1
            if route.text.startswith("v1/") or route.name == "metrics":
                # the API answers to keys, not sessions (its own test below);
                # /metrics stores nothing
                assert response.status_code < 500, where
                continue
            assert response.status_code == 403, f"{where}: {response.status_code}"
            assert response.json()["error"]["code"] == "account_suspended", where
    assert walked > 80
    assert _stored() == before
    assert enqueued == []
    # reading still works
    for url in (reverse("chat-home"), reverse("memory-page"), reverse("document-list")):
        assert client.get(url).status_code == 200, url


def test_a_suspended_user_cannot_upload_a_document_or_add_a_fact(user, auth_client):
    _suspend(user)
    upload = auth_client.post(
        reverse("document-upload"),
        {"file": SimpleUploadedFile("notes.txt", b"Some notes.", "text/plain")},
    )
    fact = auth_client.post(reverse("fact-add"), {"text": "I like tea"})
    assert (upload.status_code, fact.status_code) == (403, 403)
    assert not Document.objects.exists() and not MemoryFact.objects.exists()


def test_a_suspended_users_browser_form_gets_the_403_page(user, auth_client):
    _suspend(user)
    response = auth_client.post(
        reverse("fact-add"), {"text": "I like tea"}, HTTP_ACCEPT="text/html"
    )
    assert response.status_code == 403
    assert "suspended" in response.content.decode()
    assert response["Content-Type"].startswith("text/html")


def test_a_suspended_user_may_still_sign_out_and_delete_what_they_own(owned):  # noqa: F811
    user = owned["user"]
    _suspend(user)
    client = Client()
    client.force_login(user)
    fact_id = owned["fact"].id
    response = client.post(reverse("fact-delete", args=[fact_id]))
    assert response.status_code == 302
    assert not MemoryFact.objects.filter(id=fact_id).exists()
    assert client.post(reverse("logout")).status_code == 302


@pytest.mark.django_db(transaction=True)
def test_the_refusal_holds_under_asgi_too(user):
    """The middleware's async path (the site runs under uvicorn, an ASGI server)."""
    from asgiref.sync import async_to_sync
    from django.test import AsyncClient

    _suspend(user)
    client = AsyncClient()
    client.force_login(user)
    response = async_to_sync(client.post)(reverse("fact-add"), {"text": "tea"})
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "account_suspended"
    assert not MemoryFact.objects.exists()


def test_a_suspension_applies_to_the_next_request_and_a_lift_ends_it_at_once(
    user, auth_client
):
    """The probe is read per request, never cached: the next writing request after
    a suspension is refused, and the next one after its lift goes through."""
    from conversations.models import Conversation

    thread = Conversation.objects.create(user=user, title="Before")
    url = reverse("conversation-rename", args=[thread.id])
    assert auth_client.post(url, {"title": "One"}).status_code == 302
    _suspend(user)
    refused = auth_client.post(url, {"title": "Two"})
    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "account_suspended"
    thread.refresh_from_db()
    assert thread.title == "One"
    suspensions.suspension_lift(user=user, actor=None, actor_label="test")
    assert auth_client.post(url, {"title": "Three"}).status_code == 302
    thread.refresh_from_db()
    assert thread.title == "Three"


def test_the_suspension_probe_follows_the_rule_of_suspension_active(user):
    from datetime import timedelta

    from django.utils import timezone

    from safety.selectors import suspended_now, suspension_active
    from tests.conftest import make_user

    def both() -> tuple[bool, bool]:
        return suspended_now(user_id=user.pk), suspension_active(user=user) is not None

    assert both() == (False, False)
    suspensions.suspension_create(
        user=user,
        until=timezone.now() - timedelta(seconds=1),
        reason="over",
        actor=None,
        actor_label="test",
    )
    assert both() == (False, False)  # ended on time
    other = make_user("someone-else")
    suspensions.suspension_create(
        user=other, until=UNTIL, reason="Spam", actor=None, actor_label="test"
    )
    assert both() == (False, False)  # another user's
    _suspend(user)
    assert both() == (True, True)
    suspensions.suspension_lift(user=user, actor=None, actor_label="test")
    assert both() == (False, False)
