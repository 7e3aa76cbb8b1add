"""The moderation admin (safety/admin.py): the event list (filters, escaped text,
read-only) and the category policies (editable)."""

from __future__ import annotations

import pytest
from django.urls import reverse
from django.utils import timezone

from safety.models import CategoryPolicy, ModerationEvent
from tests.safety.factories import SCRIPT, event

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client(client, django_user_model):
    admin = django_user_model.objects.create_superuser("boss", "b@x.test", "pw-boss-1")
    client.force_login(admin)
    return client


def test_the_event_list_shows_the_offending_text_escaped(admin_client, user):
    shown = event(user)
    url = reverse("admin:safety_moderationevent_changelist")
    html = admin_client.get(url).content.decode()
    assert "&lt;script&gt;alert(&#x27;owned&#x27;)&lt;/script&gt;" in html
    assert "<script>alert(" not in html
    detail = admin_client.get(
        reverse("admin:safety_moderationevent_change", args=[shown.pk])
    ).content.decode()
    assert "&lt;script&gt;alert(" in detail and "<script>alert(" not in detail


def test_the_event_list_filters_by_category_surface_direction_status_action(
    admin_client, user
):
    event(user, category="hate", text="first-event")
    event(
        user,
        surface="api",
        action="flag",
        category="prompt_injection",
        status="dismissed",
        text="second-event",
    )
    url = reverse("admin:safety_moderationevent_changelist")
    for query, shown, hidden in [
        ("category=hate", "first-event", "second-event"),
        ("surface=api", "second-event", "first-event"),
        ("direction=input&status=dismissed", "second-event", "first-event"),
        ("action=block", "first-event", "second-event"),
        (f"created_at__year={timezone.now().year}", "first-event", None),
        ("created_at__year=2000", None, "first-event"),
    ]:
        html = admin_client.get(f"{url}?{query}").content.decode()
        assert shown is None or shown in html, query
        assert hidden is None or hidden not in html, query


def test_events_cannot_be_added_edited_or_deleted_in_admin(admin_client, user):
    shown = event(user)
    assert (
        admin_client.get(reverse("admin:safety_moderationevent_add")).status_code == 403
    )
    change = reverse("admin:safety_moderationevent_change", args=[shown.pk])
    admin_client.post(change, {"status": "dismissed", "text": "edited"})
    shown.refresh_from_db()
    assert (shown.status, shown.text) == ("new", SCRIPT)
    delete = reverse("admin:safety_moderationevent_delete", args=[shown.pk])
    assert admin_client.post(delete, {"post": "yes"}).status_code == 403
    assert ModerationEvent.objects.filter(pk=shown.pk).exists()


def test_a_category_policy_is_edited_in_admin(admin_client):
    policy = CategoryPolicy.objects.get(category="harassment")
    url = reverse("admin:safety_categorypolicy_change", args=[policy.pk])
    page = admin_client.get(url).content.decode()
    assert "Bullying, threatening" in page  # the category's description
    response = admin_client.post(
        url, {"category": "harassment", "action": "flag", "threshold": "0.75"}
    )
    assert response.status_code == 302
    policy.refresh_from_db()
    assert (policy.action, policy.threshold) == ("flag", 0.75)
    bad = admin_client.post(
        url, {"category": "harassment", "action": "block", "threshold": "1.5"}
    )
    assert bad.status_code == 200 and "less than or equal to 1" in bad.content.decode()
