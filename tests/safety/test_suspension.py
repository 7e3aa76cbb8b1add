"""Suspensions (safety/selectors.py, safety/services.py): a suspended user is refused
first by admission on the chat page (403 JSON, banner) and in embeddings; suspensions
end on time; the abuse score suspends; the suspend/unsuspend commands are audited."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse
from django.utils import timezone

from audit.models import AuditLogEntry
from chatsite.errors import Suspended
from conversations.models import Conversation, Message
from gateway import embeddings as gateway_embeddings
from safety import selectors, suspensions
from safety.management.commands.suspend import until_parse
from safety.models import ModerationEvent, Suspension
from tests.conftest import make_user
from tests.conversations.openai.helpers import no_reservations

pytestmark = pytest.mark.django_db

UNTIL = datetime(2099, 1, 2, 3, 4, tzinfo=UTC)


def suspend(user, *, until=UNTIL, reason="Spam <b>bold</b>") -> Suspension:
    return suspensions.suspension_create(
        user=user, until=until, reason=reason, actor=None, actor_label="test"
    )


def blocked_event(user, *, ago_s: float = 0.0, **fields) -> ModerationEvent:
    values = {
        "user": user,
        "surface": "chat",
        "direction": "input",
        "category": "weapons",
        "score": 0.9,
        "action": "block",
        "text": "x",
        "backend": "embedded",
        "abuse": True,  # a confident block (safety.services.block_counts)
    }
    values.update(fields)
    event = ModerationEvent.objects.create(**values)
    if ago_s:
        ModerationEvent.objects.filter(pk=event.pk).update(
            created_at=timezone.now() - timedelta(seconds=ago_s)
        )
    return event


def test_a_suspended_users_turn_is_a_403_naming_the_end_and_reason_and_spends_nothing(
    user, auth_client, enqueued, pool_heartbeat
):
    suspend(user)
    response = auth_client.post(reverse("message-send-new"), {"content": "Hello"})
    assert response.status_code == 403
    error = response.json()["error"]
    assert error["code"] == "account_suspended"
    assert "2099-01-02 03:04 UTC" in error["message"]
    assert "Spam <b>bold</b>" in error["message"]
    assert enqueued == [] and no_reservations()
    assert not Conversation.objects.exists() and not Message.objects.exists()


def test_the_chat_page_shows_a_suspended_user_an_escaped_banner(user, auth_client):
    suspend(user)
    html = auth_client.get(reverse("chat-home")).content.decode()
    assert 'id="suspension-banner"' in html
    assert "2099-01-02 03:04 UTC" in html
    assert "Spam &lt;b&gt;bold&lt;/b&gt;" in html and "<b>bold" not in html


def test_the_chat_page_has_no_banner_for_a_user_in_good_standing(user, auth_client):
    suspend(user, until=timezone.now() - timedelta(seconds=1))
    html = auth_client.get(reverse("chat-home")).content.decode()
    assert "suspension-banner" not in html


def test_a_suspension_ends_on_time_and_a_lifted_one_is_over(user):
    assert selectors.suspension_active(user=user) is None
    past = suspend(user, until=timezone.now() - timedelta(seconds=1))
    assert selectors.suspension_active(user=user) is None
    selectors.suspension_check(user=user)  # does not raise
    current = suspend(user, until=timezone.now() + timedelta(hours=1))
    assert selectors.suspension_active(user=user) == current
    with pytest.raises(Suspended):
        selectors.suspension_check(user=user)
    lifted = suspensions.suspension_lift(user=user, actor=None, actor_label="test")
    assert lifted == [current] and past not in lifted
    assert selectors.suspension_active(user=user) is None


def test_embeddings_admission_refuses_a_suspended_user_first(user):
    suspend(user)
    with pytest.raises(Suspended) as caught:
        # a model nobody serves: the suspension is checked before routing
        gateway_embeddings.embedding_admit(user=user, texts=["x"], model="nope")
    assert caught.value.status == 403 and caught.value.code == "account_suspended"
    assert no_reservations()


def test_blocked_inputs_decay_and_suspend_at_the_threshold(user, settings):
    settings.SAFETY_ABUSE_SUSPEND_SCORE = 3.0
    settings.SAFETY_ABUSE_HALF_LIFE_S = 3600.0
    settings.SAFETY_ABUSE_SUSPEND_S = 7200
    blocked_event(user, ago_s=3600)  # weighs 0.5
    blocked_event(user, category="hate")
    assert suspensions.abuse_score(user=user) == pytest.approx(1.5, abs=1e-3)
    note = suspensions.abuse_record(user=user)
    assert "If 2 more messages are blocked soon" in note
    assert selectors.suspension_active(user=user) is None
    # a dismissed event, a flagged one and a borderline block do not count
    blocked_event(user, status="dismissed")
    blocked_event(user, action="flag")
    blocked_event(user, abuse=False)
    assert suspensions.abuse_score(user=user) == pytest.approx(1.5, abs=1e-3)
    # a borderline block staff confirmed counts
    confirmed = blocked_event(user, abuse=False, status="confirmed", ago_s=3600)
    assert suspensions.abuse_score(user=user) == pytest.approx(2.0, abs=1e-3)
    confirmed.delete()
    blocked_event(user)
    blocked_event(user)
    note = suspensions.abuse_record(user=user)
    suspension = selectors.suspension_active(user=user)
    assert suspension is not None and "suspended until" in note
    assert "hate" in suspension.reason and "weapons" in suspension.reason
    remaining = (suspension.until - timezone.now()).total_seconds()
    assert 7100 < remaining <= 7200
    assert suspension.created_by is None
    entry = AuditLogEntry.objects.get(action="suspend")
    assert entry.actor_label == "abuse limit" and entry.object_id == str(suspension.pk)
    # concurrent violations after it do not suspend twice, and the score restarts
    suspensions.abuse_record(user=user)
    assert Suspension.objects.count() == 1
    assert suspensions.abuse_score(user=user) == 0.0


def test_the_suspend_and_unsuspend_commands_are_audited(user, capsys):
    call_command("suspend", "alice", "--until", "3d", "--reason", "Abuse of the API")
    suspension = selectors.suspension_active(user=user)
    assert suspension is not None and suspension.reason == "Abuse of the API"
    assert 3 * 86400 - 60 < (suspension.until - timezone.now()).total_seconds()
    call_command("unsuspend", "alice")
    assert selectors.suspension_active(user=user) is None
    entries = list(AuditLogEntry.objects.order_by("id"))
    assert [e.action for e in entries] == ["suspend", "lift"]
    assert all(e.actor is None and e.actor_label.startswith("command") for e in entries)
    assert entries[1].before["lifted_at"] is None and entries[1].after["lifted_at"]
    assert "Lifted 1 suspension" in capsys.readouterr().out


def test_the_suspend_command_refuses_a_bad_until_or_user(user):
    with pytest.raises(CommandError):
        call_command("suspend", "alice", "--until", "soon", "--reason", "r")
    with pytest.raises(CommandError):
        call_command("suspend", "nobody", "--until", "2h", "--reason", "r")
    with pytest.raises(CommandError):
        call_command("suspend", "alice", "--until", "2000-01-01", "--reason", "r")
    assert not Suspension.objects.exists()


def test_until_parses_iso_datetimes_as_utc_and_durations():
    now = datetime(2026, 1, 1, tzinfo=UTC)
    assert until_parse("2h", now=now) == now + timedelta(hours=2)
    assert until_parse("3d", now=now) == now + timedelta(days=3)
    assert until_parse("2026-02-01T10:00", now=now) == datetime(
        2026, 2, 1, 10, tzinfo=UTC
    )


def test_another_users_suspension_does_not_block(user):
    suspend(make_user("bob"))
    selectors.suspension_check(user=user)


def test_the_nth_of_n_violations_seconds_apart_suspends_despite_the_decay(
    user, settings
):
    # each event has decayed by a few millionths when the last one is weighed
    settings.SAFETY_ABUSE_SUSPEND_SCORE = 3.0
    blocked_event(user, ago_s=2)
    assert "If 2 more messages are blocked soon" in suspensions.abuse_record(user=user)
    blocked_event(user, ago_s=1)
    blocked_event(user)
    assert "suspended until" in suspensions.abuse_record(user=user)
    assert selectors.suspension_active(user=user) is not None
