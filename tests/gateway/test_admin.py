"""Billing console (gateway/admin.py): usage per user/day/model with totals and CSV,
API keys created (shown once) and revoked by admins; the seed data migration."""

from __future__ import annotations

import csv
import importlib
import io
from decimal import Decimal

import pytest
from django.apps import apps
from django.urls import reverse

from gateway import services
from gateway.models import ApiKey, ModelPool, Plan, UsageRecord
from tests.conftest import make_user

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client(client, django_user_model):
    admin = django_user_model.objects.create_superuser("boss", "b@x.test", "pw-boss-1")
    client.force_login(admin)
    return client


def record(user, job: str, model: str, prompt: int, completion: int, cost: str):
    return UsageRecord.objects.create(
        user=user,
        job_id=job,
        model=model,
        pool="default",
        prompt_tokens=prompt,
        completion_tokens=completion,
        cost=Decimal(cost),
        status="complete",
    )


def test_usage_report_groups_by_user_day_model_with_totals_and_csv(admin_client):
    ann, bob = make_user("ann"), make_user("bob")
    record(ann, "1", "m-a", 10, 5, "0.1")
    record(ann, "2", "m-a", 20, 5, "0.2")
    record(ann, "3", "m-b", 1, 1, "0.01")
    record(bob, "4", "m-a", 100, 50, "1")
    url = reverse("admin:gateway_usagerecord_report")
    page = admin_client.get(url)
    assert page.status_code == 200
    rows = page.context["rows"]
    assert {(r["username"], r["model"], r["requests"]) for r in rows} == {
        ("ann", "m-a", 2),
        ("ann", "m-b", 1),
        ("bob", "m-a", 1),
    }
    assert page.context["totals"]["prompt_tokens"] == 131
    assert page.context["totals"]["cost"] == Decimal("1.31")
    exported = admin_client.get(url, {"format": "csv"})
    assert exported["Content-Type"] == "text/csv"
    lines = list(csv.reader(io.StringIO(exported.content.decode())))
    assert lines[0][:4] == ["day", "username", "model", "requests"]
    assert len(lines) == 5 and lines[-1][0] == "TOTAL"
    assert lines[-1][3:6] == ["4", "131", "61"]
    changelist = admin_client.get(reverse("admin:gateway_usagerecord_changelist"))
    assert url in changelist.content.decode()


def test_usage_csv_admin_action_exports_the_selected_records(admin_client):
    ann = make_user("ann")
    first = record(ann, "1", "m-a", 10, 5, "0.1")
    record(ann, "2", "m-a", 20, 5, "0.2")
    response = admin_client.post(
        reverse("admin:gateway_usagerecord_changelist"),
        {"action": "export_report_csv", "_selected_action": [first.pk]},
    )
    lines = list(csv.reader(io.StringIO(response.content.decode())))
    assert lines[1][3:5] == ["1", "10"]


def test_admins_create_and_revoke_api_keys(admin_client):
    ann = make_user("ann")
    response = admin_client.post(
        reverse("admin:gateway_apikey_add"),
        {"user": ann.pk, "name": "from-admin"},
        follow=True,
    )
    assert response.status_code == 200
    shown = [str(m) for m in response.context["messages"]]
    raw = next(w for m in shown for w in m.split() if w.startswith("sk-"))
    assert services.api_key_authenticate(raw=raw) == ann
    key = ApiKey.objects.get()
    admin_client.post(
        reverse("admin:gateway_apikey_changelist"),
        {"action": "revoke", "_selected_action": [key.pk]},
    )
    assert services.api_key_authenticate(raw=raw) is None


def test_admin_pages_of_plans_and_pools_render(admin_client):
    for name in ("plan", "modelpool", "subscription", "usagerecord", "apikey"):
        url = reverse(f"admin:gateway_{name}_changelist")
        assert admin_client.get(url).status_code == 200
        if name != "usagerecord":
            assert admin_client.get(url + "add/").status_code == 200


def test_the_seed_migration_creates_the_free_plan_on_the_default_pool():
    seed = importlib.import_module("gateway.migrations.0002_seed_default_plan_and_pool")
    Plan.objects.all().delete()
    ModelPool.objects.all().delete()
    seed.seed(apps, None)
    seed.seed(apps, None)  # idempotent
    plan = Plan.objects.get(is_default=True)
    assert plan.name == "free" and plan.monthly_token_budget
    assert [p.name for p in plan.allowed_pools.all()] == ["default"]
    assert ModelPool.objects.get().model.startswith("SmolLM2-135M-Instruct")
