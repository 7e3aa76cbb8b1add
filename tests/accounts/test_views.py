"""The settings page (accounts/views.py, accounts/services.py) and the shared layout of every page: one-time
display of a new API key after POST-redirect-GET, confirmation before every revoke and
delete, profile / password / preferences forms, account deletion (every user-owned row
and Redis key goes, another user's stay), and the error pages."""

from __future__ import annotations

import datetime as dt
import json
import uuid
from typing import Any

import pytest
from django.apps import apps
from django.contrib.admin.models import ADDITION, LogEntry
from django.contrib.auth import get_user_model
from django.db import models
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from accounts import services as account
from accounts.models import Appearance
from conversations.models import Conversation, Feedback, Message
from gateway import selectors, services
from gateway.cache.exact import exact_store
from gateway.models import (
    ApiKey,
    ModelPool,
    SemanticCacheEntry,
    Subscription,
    UsageRecord,
    UserPreference,
)
from inference import keys
from inference.connections import redis_sync
from memory.models import Chunk, Citation, Document, MemoryFact, MemorySettings
from memory.selectors import memory_enabled
from safety.categories import Category
from safety.models import Appeal, ModerationEvent, Suspension
from tests.conftest import fake_heartbeat
from tests.gateway import factories
from tools.models import ToolPreference

pytestmark = pytest.mark.django_db

VECTOR = [0.0] * 383 + [1.0]


# ---- API keys: shown once after a redirect, revoked after a confirmation ----


def test_creating_a_key_redirects_and_the_next_page_shows_it_once(auth_client, user):
    url = reverse("account-settings")
    created = auth_client.post(url, {"name": "script"})
    assert created.status_code == 302 and created["Location"] == url + "#new-key"
    page = auth_client.get(url)
    raw = page.context["new_key"]
    assert raw.startswith("sk-") and raw in page.content.decode()
    assert services.api_key_authenticate(raw=raw) == user
    again = auth_client.get(url).content.decode()  # a reload: the secret is gone
    assert raw not in again and "script" in again
    assert ApiKey.objects.filter(user=user).count() == 1  # the reload made no key
    assert page["Cache-Control"].startswith("max-age=0")


def test_revoking_asks_first_then_hides_the_key(auth_client, user):
    key, raw = services.api_key_create(user=user, name="old")
    url = reverse("api-key-revoke", args=[key.pk])
    confirm = auth_client.get(url)
    assert confirm.status_code == 200
    assert "Revoke this API key?" in confirm.content.decode()
    assert services.api_key_authenticate(raw=raw) == user  # asking revokes nothing
    revoked = auth_client.post(url)
    assert revoked.status_code == 302
    assert services.api_key_authenticate(raw=raw) is None
    page = auth_client.get(reverse("account-settings")).content.decode()
    assert f"<code>{key.prefix}…</code>" not in page  # the flash names it, the list not
    assert auth_client.get(url).status_code == 404  # a revoked key is gone


def test_another_users_key_is_a_404_to_confirm_and_to_revoke(client, user, other_user):
    key, raw = services.api_key_create(user=user)
    client.force_login(other_user)
    url = reverse("api-key-revoke", args=[key.pk])
    assert client.get(url).status_code == 404
    assert client.post(url).status_code == 404
    assert services.api_key_authenticate(raw=raw) == user


# ---- confirmations of the Documents and Memory pages ----


def test_document_delete_asks_first_and_a_post_deletes(auth_client, user, other_user):
    doc = Document.objects.create(user=user, title="notes.txt", content_type="txt")
    url = reverse("document-delete", args=[doc.id])
    confirm = auth_client.get(url).content.decode()
    assert "Delete this document?" in confirm and "notes.txt" in confirm
    assert Document.objects.filter(id=doc.id).exists()
    list_page = auth_client.get(reverse("document-list")).content.decode()
    assert f'href="{url}"' in list_page  # the list links to the confirmation
    assert auth_client.post(url).status_code == 302
    assert not Document.objects.filter(id=doc.id).exists()
    theirs = Document.objects.create(user=other_user, title="x", content_type="txt")
    url = reverse("document-delete", args=[theirs.id])
    assert auth_client.get(url).status_code == 404


def test_fact_delete_asks_first_and_a_post_forgets(auth_client, user, other_user):
    fact = MemoryFact.objects.create(user=user, text="likes tea", embedding=VECTOR)
    url = reverse("fact-delete", args=[fact.id])
    assert "likes tea" in auth_client.get(url).content.decode()
    assert MemoryFact.objects.filter(id=fact.id).exists()
    assert auth_client.post(url).status_code == 302
    assert not MemoryFact.objects.filter(id=fact.id).exists()
    theirs = MemoryFact.objects.create(user=other_user, text="x", embedding=VECTOR)
    assert auth_client.get(reverse("fact-delete", args=[theirs.id])).status_code == 404


def test_documents_json_carries_the_status_the_page_polls(auth_client, user):
    Document.objects.create(
        user=user, title="a.txt", content_type="txt", status=Document.Status.PROCESSING
    )
    data = auth_client.get(
        reverse("document-list"), HTTP_ACCEPT="application/json"
    ).json()
    (doc,) = data["documents"]
    assert doc["status"] == "processing" and doc["status_display"] == "Processing"
    page = auth_client.get(reverse("document-list")).content.decode()
    assert 'http-equiv="refresh"' not in page and "documents.js" in page


# ---- profile, password, preferences ----


def test_profile_edit_validates_and_saves(auth_client, user, other_user):
    url = reverse("account-profile")
    taken = auth_client.post(url, {"username": "MALLORY", "email": "a@example.com"})
    assert taken.status_code == 400
    assert "already exists" in taken.content.decode()
    bad = auth_client.post(url, {"username": "alice", "email": "not-an-address"})
    assert bad.status_code == 400
    user.refresh_from_db()
    assert user.username == "alice" and user.email == ""
    saved = auth_client.post(url, {"username": "alice2", "email": "a@example.com"})
    assert saved.status_code == 302
    user.refresh_from_db()
    assert (user.username, user.email) == ("alice2", "a@example.com")


def test_password_change_keeps_this_session_signed_in(auth_client, user):
    url = reverse("account-password")
    wrong = auth_client.post(
        url,
        {
            "old_password": "nope",
            "new_password1": "a-new-pw-4567",
            "new_password2": "a-new-pw-4567",
        },
    )
    assert wrong.status_code == 400
    changed = auth_client.post(
        url,
        {
            "old_password": "pw-alice-123",
            "new_password1": "a-new-pw-4567",
            "new_password2": "a-new-pw-4567",
        },
    )
    assert changed.status_code == 302
    user.refresh_from_db()
    assert user.check_password("a-new-pw-4567")
    assert auth_client.get(reverse("account-settings")).status_code == 200


def test_preferences_store_memory_and_a_default_model_the_plan_allows(
    auth_client, user
):
    small = factories.pool("small")
    factories.pool("big")
    factories.subscribe(user, factories.plan(pools=[small]))
    url = reverse("account-preferences")
    refused = auth_client.post(url, {"default_model": "big"})
    assert refused.status_code == 302
    assert UserPreference.objects.filter(user=user).count() == 0  # nothing stored
    assert memory_enabled(user=user) is True
    auth_client.post(url, {"default_model": "small"})  # memory box unticked: off
    assert selectors.default_model(user=user) == "small"
    assert memory_enabled(user=user) is False
    page = auth_client.get(reverse("account-settings")).content.decode()
    assert '<option value="small" selected>' in page
    # a default that is no longer available is ignored, not an error
    ModelPool.objects.filter(name="small").update(enabled=False)
    assert selectors.default_model(user=user) is None


def test_the_chat_uses_the_default_model_when_none_is_chosen(
    user, django_capture_on_commit_callbacks
):
    from conversations import services as conversation_services

    pools = [factories.pool("small"), factories.pool("default")]
    factories.subscribe(user, factories.plan(pools=pools))
    fake_heartbeat("small")
    fake_heartbeat("default")
    account.preferences_save(
        user=user,
        reuse_cached_answers=False,
        memory_enabled=False,
        default_model="small",
    )
    with django_capture_on_commit_callbacks(execute=True):
        conversation_services.turn_start(user=user, content="Hello")
    r = redis_sync()
    assert r.xlen(keys.queue_key("small")) == 1
    assert r.xlen(keys.queue_key("default")) == 0


# ---- account deletion ----


def _user_fks() -> list[tuple[type[models.Model], models.Field]]:
    """Every (model, field) with a foreign key or one-to-one to the user model."""
    user_model = get_user_model()
    return [
        (model, field)
        for model in apps.get_models()
        for field in model._meta.concrete_fields
        if field.is_relation and field.related_model is user_model
    ]


def _seed(user: Any) -> set[str]:
    """Store a row of every user-owned model and some Redis keys of the user; return
    the names of those keys."""
    conversation = Conversation.objects.create(user=user, title="hello")
    question = Message.objects.create(
        conversation=conversation, role="user", content="hi", status="complete"
    )
    answer = Message.objects.create(
        conversation=conversation,
        role="assistant",
        content="hello",
        status="complete",
        parent=question,
    )
    Feedback.objects.create(user=user, message=answer, rating="up")
    document = Document.objects.create(user=user, title="d.txt", content_type="txt")
    chunk = Chunk.objects.create(
        document=document,
        user=user,
        ord=0,
        text="x",
        start_char=0,
        end_char=1,
        embedding=VECTOR,
    )
    Citation.objects.create(message=answer, chunk=chunk, number=1)
    LogEntry.objects.create(user=user, action_flag=ADDITION, object_repr="x")
    MemoryFact.objects.create(user=user, text="likes tea", embedding=VECTOR)
    MemorySettings.objects.create(user=user, enabled=True)
    SemanticCacheEntry.objects.create(
        user=user,
        model="m",
        system_hash="s",
        params_hash="p",
        prompt_hash=uuid.uuid4().hex,
        prompt="hi",
        embedding=VECTOR,
        answer="hello",
        finish_reason="stop",
    )
    services.api_key_create(user=user)
    UserPreference.objects.create(user=user)
    ToolPreference.objects.create(user=user, disabled=["web_search"])
    Appearance.objects.create(user=user, theme="dark")
    Subscription.objects.create(user=user, plan=factories.plan(name=f"p-{user.pk}"))
    job_id = f"job-{user.pk}"
    UsageRecord.objects.create(user=user, status="complete", job_id=job_id)
    Suspension.objects.create(
        user=user, reason="r", until=timezone.now() - dt.timedelta(days=1)
    )
    event = ModerationEvent.objects.create(
        user=user,
        surface="chat",
        direction="input",
        category=Category.values[0],
        score=0.9,
        action="block",
        text="x",
        backend="rules",
    )
    Appeal.objects.create(event=event, user=user, comment="a mistake")
    r = redis_sync()
    today = dt.date.today()
    r.set(keys.quota_day_key(user.pk, today), 10)
    r.set(keys.quota_month_key(user.pk, today), 10)
    exact_store(
        digest=f"d{user.pk}",
        answer="a",
        answer_model="m",
        finish_reason="stop",
        user_id=user.pk,
    )
    pending = keys.cache_pending_key(f"p{user.pk}")
    r.set(pending, json.dumps({"user_id": user.pk}))
    r.xadd(keys.gen_key(job_id), {"type": "token", "text": "hi"})
    r.set(keys.final_key(job_id), 1)
    return {
        keys.quota_day_key(user.pk, today),
        keys.quota_month_key(user.pk, today),
        keys.cache_exact_key(f"d{user.pk}"),
        pending,
        keys.gen_key(job_id),
        keys.final_key(job_id),
    }


def _redis_keys() -> set[str]:
    return {k.decode() if isinstance(k, bytes) else k for k in redis_sync().keys("*")}


def _counts(user_id: int) -> dict[str, int]:
    counts = {
        f"{model._meta.label}.{field.name}": model._default_manager.filter(
            **{field.attname: user_id}
        ).count()
        for model, field in _user_fks()
    }
    counts["conversations.Message"] = Message.objects.filter(
        conversation__user_id=user_id
    ).count()
    counts["memory.Citation"] = Citation.objects.filter(chunk__user_id=user_id).count()
    return counts


def test_account_delete_removes_every_user_owned_row_and_redis_key(
    user, other_user, django_capture_on_commit_callbacks
):
    mine = _seed(user)
    _seed(other_user)
    before, theirs_before = _counts(user.pk), _counts(other_user.pk)
    # every model that owns rows of a user (CASCADE) is seeded: a new one fails here
    # until this test seeds it (and the deletion is then checked for it too)
    owned = {
        f"{model._meta.label}.{field.name}"
        for model, field in _user_fks()
        if field.remote_field.on_delete is models.CASCADE
    }
    assert {name for name in owned if before[name] == 0} == set()
    keys_before = _redis_keys()
    assert mine <= keys_before

    with django_capture_on_commit_callbacks(execute=True):
        deleted = account.account_delete(user=user)

    assert deleted["conversations.Message"] == 2
    assert not get_user_model().objects.filter(pk=user.pk).exists()
    assert {name: n for name, n in _counts(user.pk).items() if n} == {}
    assert _counts(other_user.pk) == theirs_before
    keys_after = _redis_keys()
    assert not keys_after & mine  # none of the user's keys is left
    # every other key is still there (a live worker of another test may add its
    # heartbeat meanwhile, so this is a subset, not an equality)
    assert keys_before - mine <= keys_after


def test_account_delete_page_needs_the_password(auth_client, user):
    url = reverse("account-delete")
    page = auth_client.get(url).content.decode()
    assert 'type="password"' in page and 'name="password"' in page
    wrong = auth_client.post(url, {"password": "nope"})
    assert wrong.status_code == 400 and "not your password" in wrong.content.decode()
    assert get_user_model().objects.filter(pk=user.pk).exists()
    gone = auth_client.post(url, {"password": "pw-alice-123"})
    assert gone.status_code == 302 and gone["Location"] == reverse("login")
    assert not get_user_model().objects.filter(pk=user.pk).exists()
    assert auth_client.get(reverse("account-settings")).status_code == 302  # signed out


# ---- error pages and the layout ----


def test_404_page_is_in_the_layout_and_json_clients_get_json(auth_client):
    response = auth_client.get("/no-such-page/")
    assert response.status_code == 404
    html = response.content.decode()
    assert "Not found" in html and 'id="sidebar-toggle"' in html
    assert 'class="skip-link"' in html
    as_json = auth_client.get("/no-such-page/", HTTP_ACCEPT="application/json")
    assert as_json.json()["error"]["code"] == "not_found"


def test_500_page_renders_without_database_or_user(rf, django_assert_num_queries):
    from chatsite.http import server_error

    with django_assert_num_queries(0):
        response = server_error(rf.get("/"))
    assert response.status_code == 500
    html = response.content.decode()
    assert "Server error" in html and "sidebar-toggle" not in html


@pytest.mark.parametrize("status", [400, 403, 404, 429, 500, 503])
def test_every_error_status_has_a_page_of_its_own(rf, user, status):
    from chatsite.errors import DomainError, error_page

    request = rf.get("/")
    request.user = user
    response = error_page(request, DomainError("Explained here.", status=status))
    assert response.status_code == status
    html = response.content.decode()
    assert "Explained here." in html and "<main" in html and "site.css" in html


@pytest.mark.parametrize(
    "name", ["chat-home", "document-list", "memory-page", "account-settings"]
)
def test_signed_in_pages_share_the_layout(auth_client, name):
    html = auth_client.get(reverse(name)).content.decode()
    assert 'aria-controls="sidebar"' in html and 'id="sidebar"' in html
    assert "site.css" in html and "site.js" in html
    assert html.count("<main") == 1


def test_signed_out_pages_have_no_sidebar():
    for name in ("login", "signup"):
        html = Client().get(reverse(name)).content.decode()
        assert "site.css" in html and 'id="sidebar"' not in html


def test_the_quota_panel_alone_shows_the_tokens_left_now(auth_client, user):
    """GET /settings/quota/: what the chat page fetches after each answer
    (static/quota.js), so the sidebar counts the answer just settled."""
    from gateway import quota

    plan = factories.plan("metered", tokens_per_day=1000)
    factories.subscribe(user, plan)
    url = reverse("account-quota")
    before = auth_client.get(url)
    assert before.status_code == 200
    assert 'id="quota"' in before.content.decode()
    assert "1000</data> today" in before.content.decode()
    quota.quota_reserve(
        user_id=user.pk,
        job_id="answered",
        tokens=300,
        limits=selectors.plan_limits(plan=plan),
    )
    quota.quota_settle(user_id=user.pk, job_id="answered", tokens=120)
    after = auth_client.get(url).content.decode()
    assert "880</data> today" in after
    assert auth_client.post(url).status_code == 405


def test_the_quota_panel_needs_a_signed_in_user(client):
    response = client.get(reverse("account-quota"))
    assert response.status_code == 302 and "/login/" in response["Location"]
