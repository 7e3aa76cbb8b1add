"""Gateway services (gateway/services.py): prompt estimate, billing at settlement,
API keys (hashed, shown once, revocable) and the create_api_key command."""

from __future__ import annotations

import hashlib
from datetime import timedelta
from decimal import Decimal
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse
from django.utils import timezone

from gateway import generations, quota, services
from gateway.models import ApiKey, UsageRecord
from inference import protocol
from tests.gateway import factories

pytestmark = pytest.mark.django_db


def test_the_prompt_estimate_is_above_the_scripted_engines_count():
    from inference.engines.scripted import ScriptedEngine

    messages = [
        {"role": "system", "content": "You are a helpful, concise assistant."},
        {"role": "user", "content": "What is the capital of France, in one word?"},
    ]
    assert generations.prompt_tokens_estimate(
        messages
    ) >= ScriptedEngine().count_tokens(messages)


def test_settlement_writes_one_usage_record_priced_from_the_pool(
    user, django_capture_on_commit_callbacks
):
    factories.pool(
        "priced",
        price_input_per_1k=Decimal("0.5"),
        price_output_per_1k=Decimal("1.5"),
    )
    limits = quota.Limits(per_day=10_000)
    quota.quota_reserve(user_id=user.pk, job_id="job-1", tokens=500, limits=limits)
    usage = protocol.Usage(prompt_tokens=1000, completion_tokens=200, cached_tokens=10)
    with django_capture_on_commit_callbacks(execute=True):
        record = generations.usage_settle(
            user_id=user.pk,
            job_id="job-1",
            status="complete",
            usage=usage,
            pool="priced",
            model="m-1",
            ttft_ms=12,
            latency_ms=340,
        )
    assert record is not None
    assert record.cost == Decimal("0.800000")  # 1000 x 0.5/1K + 200 x 1.5/1K
    assert (record.prompt_tokens, record.completion_tokens, record.cached_tokens) == (
        1000,
        200,
        10,
    )
    assert (record.ttft_ms, record.latency_ms, record.cache_hit) == (12, 340, False)
    assert quota.quota_windows(user_id=user.pk, limits=limits)[1].used == 1200
    with django_capture_on_commit_callbacks(execute=True):
        again = generations.usage_settle(
            user_id=user.pk, job_id="job-1", status="complete", usage=usage
        )
    assert again is None and UsageRecord.objects.count() == 1
    assert quota.quota_windows(user_id=user.pk, limits=limits)[1].used == 1200


def test_api_keys_are_stored_hashed_and_revocable(user, other_user):
    key, raw = services.api_key_create(user=user, name="laptop")
    assert raw.startswith("sk-") and len(raw) > 40
    stored = ApiKey.objects.get(pk=key.pk)
    assert stored.key_hash == hashlib.sha256(raw.encode()).hexdigest()
    assert raw not in (stored.key_hash, stored.prefix) and raw.startswith(stored.prefix)
    assert services.api_key_authenticate(raw=raw) == user
    assert ApiKey.objects.get(pk=key.pk).last_used_at is not None
    assert services.api_key_authenticate(raw=raw + "x") is None
    with pytest.raises(Exception) as info:
        services.api_key_revoke(user=other_user, key_id=key.pk)
    assert getattr(info.value, "status", None) == 404
    services.api_key_revoke(user=user, key_id=key.pk)
    assert services.api_key_authenticate(raw=raw) is None


def test_create_api_key_command_prints_the_key_once(user):
    out, err = StringIO(), StringIO()
    call_command("create_api_key", "alice", "--name", "ci", stdout=out, stderr=err)
    raw = out.getvalue().strip()
    assert services.api_key_authenticate(raw=raw) == user
    assert ApiKey.objects.get().name == "ci"
    assert raw not in err.getvalue()
    with pytest.raises(CommandError, match="No user named"):
        call_command("create_api_key", "nobody", stdout=StringIO(), stderr=StringIO())


def test_settings_page_creates_a_key_shown_once_and_revokes_it(auth_client, user):
    url = reverse("account-settings")
    created = auth_client.post(url, {"name": "script"})
    assert created.status_code == 302  # POST-redirect-GET: a reload makes no key
    shown = auth_client.get(url)
    raw = shown.context["new_key"]
    assert raw in shown.content.decode()
    assert services.api_key_authenticate(raw=raw) == user
    page = auth_client.get(url).content.decode()
    assert raw not in page and "script" in page
    key = ApiKey.objects.get()
    revoked = auth_client.post(reverse("api-key-revoke", args=[key.pk]))
    assert revoked.status_code == 302
    assert services.api_key_authenticate(raw=raw) is None


def test_another_user_cannot_revoke_my_key(user, other_user, client):
    key, raw = services.api_key_create(user=user)
    client.force_login(other_user)
    response = client.post(reverse("api-key-revoke", args=[key.pk]))
    assert response.status_code == 404
    assert services.api_key_authenticate(raw=raw) == user


def test_a_key_revoked_between_two_requests_is_refused_on_the_second(user):
    key, raw = services.api_key_create(user=user)
    assert services.api_key_authenticate(raw=raw) == user
    services.api_key_revoke(key_id=key.pk)
    assert services.api_key_authenticate(raw=raw) is None


def test_a_suspension_made_between_two_requests_refuses_the_second(user):
    from chatsite.errors import Suspended
    from safety import selectors as safety_selectors
    from safety import suspensions

    _key, raw = services.api_key_create(user=user)
    safety_selectors.suspension_check(user=services.api_key_authenticate(raw=raw))
    suspensions.suspension_create(
        user=user,
        until=timezone.now() + timedelta(hours=1),
        reason="Spam",
        actor=None,
        actor_label="test",
    )
    again = services.api_key_authenticate(raw=raw)
    with pytest.raises(Suspended):
        safety_selectors.suspension_check(user=again)


def test_key_user_plan_and_suspension_are_one_query(
    user, django_assert_num_queries, settings
):
    from gateway import selectors
    from safety import selectors as safety_selectors

    factories.subscribe(user, factories.plan("pro", pools=[factories.pool("p1")]))
    _key, raw = services.api_key_create(user=user)
    # warm: stamp last_used_at, load the pools-and-plans snapshot (per process)
    selectors.plan_for_user(user=services.api_key_authenticate(raw=raw))
    settings.GATEWAY_CONFIG_CACHE_S = 60
    with django_assert_num_queries(1):
        found = services.api_key_authenticate(raw=raw)
        safety_selectors.suspension_check(user=found)
        assert selectors.plan_for_user(user=found).name == "pro"
