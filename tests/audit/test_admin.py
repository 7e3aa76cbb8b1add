"""The audit log (audit/admin.py, audit/services.py) and the audited admins: every admin
change on users, plans, pools, suspensions, policies and events is recorded before →
after; the log itself cannot be added to, changed or deleted in admin."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from audit.models import AuditLogEntry
from gateway.models import Plan
from safety import selectors, suspensions
from safety.models import CategoryPolicy, ModerationEvent, Suspension
from tests.conftest import make_user
from tests.gateway import factories
from tests.safety.factories import event

pytestmark = pytest.mark.django_db

SCRIPT = "<script>alert('x')</script>"


@pytest.fixture
def boss(django_user_model):
    return django_user_model.objects.create_superuser("boss", "b@x.test", "pw-boss-1")


@pytest.fixture
def admin_client(client, boss):
    client.force_login(boss)
    return client


def run_action(client, action: str, events: list[ModerationEvent]):
    return client.post(
        reverse("admin:safety_moderationevent_changelist"),
        {"action": action, "_selected_action": [e.pk for e in events]},
        follow=True,
    )


@pytest.mark.parametrize(
    ("action", "status", "verb"),
    [
        ("confirm_events", "confirmed", "confirm"),
        ("dismiss_events", "dismissed", "dismiss"),
    ],
)
def test_confirm_and_dismiss_in_bulk_are_audited_per_event(
    admin_client, boss, user, action, status, verb
):
    events = [event(user), event(user, category="hate")]
    response = run_action(admin_client, action, events)
    assert response.status_code == 200
    assert set(ModerationEvent.objects.values_list("status", flat=True)) == {status}
    entries = AuditLogEntry.objects.filter(action=verb)
    assert sorted(int(e.object_id) for e in entries) == sorted(e.pk for e in events)
    for entry in entries:
        assert entry.actor == boss and entry.actor_label == "boss"
        assert entry.object_type == "safety.moderationevent"
        assert (entry.before["status"], entry.after["status"]) == ("new", status)


def test_suspend_and_lift_from_events_suspend_each_user_once(
    admin_client, boss, user, settings
):
    settings.SAFETY_ADMIN_SUSPEND_S = 3600
    bob = make_user("bob")
    events = [event(user), event(user, category="hate"), event(bob)]
    run_action(admin_client, "suspend_users", events)
    assert Suspension.objects.count() == 2
    mine = selectors.suspension_active(user=user)
    assert mine is not None and mine.created_by == boss
    assert "hate" in mine.reason and "weapons" in mine.reason
    assert 3500 < (mine.until - timezone.now()).total_seconds() <= 3600
    assert AuditLogEntry.objects.filter(action="suspend", actor=boss).count() == 2
    run_action(admin_client, "lift_suspensions", events[:1])
    assert selectors.suspension_active(user=user) is None
    assert selectors.suspension_active(user=bob) is not None
    lift = AuditLogEntry.objects.get(action="lift")
    assert lift.before["lifted_at"] is None
    assert lift.after["lifted_at"] and lift.after["lifted_by_id"] == boss.pk


def test_the_actions_need_the_change_permission_on_events(client, user):
    viewer = make_user("viewer")
    viewer.is_staff = True
    viewer.save()
    from django.contrib.auth.models import Permission

    viewer.user_permissions.add(Permission.objects.get(codename="view_moderationevent"))
    client.force_login(viewer)
    run_action(client, "suspend_users", [event(user)])
    assert not Suspension.objects.exists()
    assert not AuditLogEntry.objects.exists()


def test_editing_a_user_in_admin_is_audited_without_the_password(
    admin_client, boss, user
):
    url = reverse("admin:auth_user_change", args=[user.pk])
    form = {
        "username": "alice",
        "first_name": "Alice",
        "last_name": "",
        "email": "a@x.test",
        "is_active": "on",
        "date_joined_0": "2026-01-01",
        "date_joined_1": "00:00:00",
    }
    response = admin_client.post(url, form)
    assert response.status_code == 302, response.content.decode()[:2000]
    entry = AuditLogEntry.objects.get(object_type="auth.user")
    assert entry.action == "change" and entry.actor == boss
    assert entry.before["email"] == "" and entry.after["email"] == "a@x.test"
    assert entry.before["first_name"] == "" and entry.after["first_name"] == "Alice"
    assert entry.before["password"] == "<redacted>" == entry.after["password"]
    assert "groups" in entry.after


def test_plan_edits_and_deletes_are_audited(admin_client, boss):
    plan = factories.plan(tokens_per_day=1000)
    url = reverse("admin:gateway_plan_delete", args=[plan.pk])
    response = admin_client.post(url, {"post": "yes"})
    assert response.status_code == 302
    assert not Plan.objects.filter(pk=plan.pk).exists()
    entry = AuditLogEntry.objects.get(object_type="gateway.plan")
    assert entry.action == "delete" and entry.object_id == str(plan.pk)
    assert entry.before["tokens_per_day"] == 1000 and entry.after is None


def test_pool_list_editable_and_policy_edits_are_audited(admin_client):
    pool = factories.pool("default", enabled=True)
    policy = CategoryPolicy.objects.get(category="hate")
    response = admin_client.post(
        reverse("admin:safety_categorypolicy_change", args=[policy.pk]),
        {"category": "hate", "action": "flag", "threshold": "0.7"},
    )
    assert response.status_code == 302
    entry = AuditLogEntry.objects.get(object_type="safety.categorypolicy")
    assert (entry.before["action"], entry.after["action"]) == ("block", "flag")
    assert (entry.before["threshold"], entry.after["threshold"]) == (None, 0.7)
    # deleting selected pools goes through delete_queryset
    admin_client.post(
        reverse("admin:gateway_modelpool_changelist"),
        {"action": "delete_selected", "_selected_action": [pool.pk], "post": "yes"},
    )
    entry = AuditLogEntry.objects.get(object_type="gateway.modelpool")
    assert entry.action == "delete" and entry.before["name"] == "default"


def test_adding_a_suspension_in_admin_records_who(admin_client, boss, user):
    until = timezone.now() + timedelta(days=1)
    response = admin_client.post(
        reverse("admin:safety_suspension_add"),
        {
            "user": user.pk,
            "until_0": until.strftime("%Y-%m-%d"),
            "until_1": until.strftime("%H:%M:%S"),
            "reason": "Spam",
        },
    )
    assert response.status_code == 302, response.content.decode()[:3000]
    suspension = Suspension.objects.get()
    assert suspension.created_by == boss
    entry = AuditLogEntry.objects.get(object_type="safety.suspension")
    assert entry.action == "add" and entry.before is None
    assert entry.after["created_by_id"] == boss.pk and entry.after["reason"] == "Spam"


def test_the_audit_log_is_read_only_in_admin_even_for_superusers(admin_client, user):
    suspensions.suspension_create(
        user=user,
        until=timezone.now() + timedelta(hours=1),
        reason=SCRIPT,
        actor=None,
        actor_label="t",
    )
    entry = AuditLogEntry.objects.get()
    changelist = admin_client.get(reverse("admin:audit_auditlogentry_changelist"))
    html = changelist.content.decode()
    assert changelist.status_code == 200
    assert 'name="action"' not in html  # no actions, no "delete selected"
    assert reverse("admin:audit_auditlogentry_add") not in html
    change_url = reverse("admin:audit_auditlogentry_change", args=[entry.pk])
    detail = admin_client.get(change_url).content.decode()
    assert "&lt;script&gt;alert(" in detail and "<script>alert(" not in detail
    assert 'type="submit"' not in detail.split('id="content-main"')[1]
    assert admin_client.post(change_url, {"actor_label": "me"}).status_code == 403
    delete_url = reverse("admin:audit_auditlogentry_delete", args=[entry.pk])
    assert admin_client.post(delete_url, {"post": "yes"}).status_code == 403
    add_url = reverse("admin:audit_auditlogentry_add")
    assert admin_client.post(add_url, {}).status_code == 403
    entry.refresh_from_db()
    assert entry.actor_label == "t"


def test_a_stored_entry_cannot_be_changed_or_deleted(user):
    suspensions.suspension_lift(user=user, actor=None)  # nothing to lift: no entry
    assert not AuditLogEntry.objects.exists()
    suspensions.suspension_create(
        user=user,
        until=timezone.now() + timedelta(hours=1),
        reason="r",
        actor=None,
        actor_label="t",
    )
    entry = AuditLogEntry.objects.get()
    entry.actor_label = "someone else"
    with pytest.raises(ValueError, match="append-only"):
        entry.save()
    with pytest.raises(ValueError, match="append-only"):
        entry.delete()
    assert AuditLogEntry.objects.get().actor_label == "t"


def test_a_password_change_in_admin_is_audited_without_the_hash(admin_client, user):
    url = reverse("admin:auth_user_password_change", args=[user.pk])
    response = admin_client.post(
        url, {"password1": "n3w-Secret-pw!", "password2": "n3w-Secret-pw!"}
    )
    assert response.status_code == 302
    entry = AuditLogEntry.objects.get(object_type="auth.user")
    assert entry.after == {"password": "<redacted> (changed)"}
    user.refresh_from_db()
    assert user.password not in str(entry.after)
