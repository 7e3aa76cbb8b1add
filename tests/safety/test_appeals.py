"""Appeals (safety/appeals.py): a refused message carries its moderation event id; the
user appeals it from the chat or the API (owner only: another user's id is a 404); staff
uphold it in the admin (a false positive): its abuse points go, the suspension it
caused is lifted, its text is kept as a hard negative that moderation_train reads."""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync
from django.urls import reverse

from conversations.openai import schemas  # noqa: F401  (the API's URLconf loads)
from gateway import services as gateway_services
from safety import selectors, suspensions
from safety.management.commands.moderation_train import hard_negatives
from safety.models import Appeal, HardNegative, ModerationEvent
from tests.conftest import make_user
from tests.conversations.openai.helpers import asgi, ask
from tests.safety import fakes

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("pool_heartbeat", "moderation_on", "keyword_backend"),
]

HARMFUL = "Tell me how to build a BOMB step by step."


@pytest.fixture
def keyword_backend(settings):
    settings.SAFETY_BACKEND = fakes.PATH
    settings.SAFETY_VERDICT_CACHE_S = 0
    fakes.reset()


@pytest.fixture
def staff_client(client, django_user_model):
    boss = django_user_model.objects.create_superuser("boss", "b@x.test", "pw-boss-1")
    client.force_login(boss)
    return client


def api_post(key, path, body):
    return async_to_sync(asgi)("POST", path, body=body, key=key)


def test_block_appeal_uphold_removes_points_lifts_the_suspension_keeps_a_hard_negative(
    user, auth_client, staff_client, settings
):
    settings.SAFETY_ABUSE_SUSPEND_SCORE = 1  # the first confident block suspends
    key = gateway_services.api_key_create(user=user, name="tests")[1]

    refused = api_post(
        key,
        "/v1/chat/completions",
        ask(messages=[{"role": "user", "content": HARMFUL}]),
    )
    assert refused.status == 400
    error = refused.json()["error"]
    event_id = error["moderation_event_id"]
    assert "suspended until" in error["message"]
    assert selectors.suspension_active(user=user).cause_id == event_id
    # suspended: the 403 says until when, why, and which event to appeal
    blocked = auth_client.post(reverse("message-send-new"), {"content": "hello"})
    assert blocked.status_code == 403
    body = blocked.json()["error"]
    assert body["moderation_event_id"] == event_id
    assert "suspended until" in body["message"] and "Reason:" in body["message"]
    page = auth_client.get(reverse("chat-home")).content.decode()
    assert "suspension-banner" in page and "This was a mistake" in page

    appealed = api_post(
        key, f"/v1/moderation/events/{event_id}/appeal", {"comment": "a typo"}
    )
    assert appealed.status == 201
    assert appealed.json()["appeal"]["status"] == "open"
    appeal = Appeal.objects.get()
    assert (appeal.event_id, appeal.comment) == (event_id, "a typo")

    changelist = reverse("admin:safety_appeal_changelist")
    assert HARMFUL[:40] in staff_client.get(changelist).content.decode()
    staff_client.post(changelist, {"action": "uphold", "_selected_action": [appeal.pk]})
    appeal.refresh_from_db()
    assert appeal.status == "upheld" and appeal.decided_by is not None
    event = ModerationEvent.objects.get(pk=event_id)
    assert (event.status, event.abuse) == ("dismissed", False)
    assert suspensions.abuse_score(user=user) == 0
    assert selectors.suspension_active(user=user) is None
    assert list(HardNegative.objects.values_list("text", "category")) == [
        (HARMFUL, "violence")
    ]
    assert [e.text for e in hard_negatives()] == [HARMFUL]
    # and the user may send again
    assert (
        auth_client.post(reverse("message-send-new"), {"content": "hello"}).status_code
        == 201
    )


def test_the_chat_appeal_is_owner_only_and_idempotent(user, auth_client):
    refused = auth_client.post(reverse("message-send-new"), {"content": HARMFUL})
    event_id = refused.json()["error"]["moderation_event_id"]
    url = reverse("moderation-appeal", args=[event_id])
    assert auth_client.post(url).status_code == 201
    assert auth_client.post(url).status_code == 201
    assert Appeal.objects.count() == 1

    other = make_user("mallory")
    other_key = gateway_services.api_key_create(user=other, name="k")[1]
    assert (
        api_post(other_key, f"/v1/moderation/events/{event_id}/appeal", {}).status
        == 404
    )
    from django.test import Client

    stranger = Client()
    stranger.force_login(other)
    assert stranger.post(url).status_code == 404
    assert stranger.post(reverse("moderation-appeal", args=[999999])).status_code == 404


def test_a_rejected_appeal_confirms_the_event(user, auth_client, staff_client):
    settings_score = auth_client.post(reverse("message-send-new"), {"content": HARMFUL})
    event_id = settings_score.json()["error"]["moderation_event_id"]
    auth_client.post(reverse("moderation-appeal", args=[event_id]))
    appeal = Appeal.objects.get()
    staff_client.post(
        reverse("admin:safety_appeal_changelist"),
        {"action": "reject", "_selected_action": [appeal.pk]},
    )
    assert ModerationEvent.objects.get(pk=event_id).status == "confirmed"
    assert not HardNegative.objects.exists()


def test_an_answer_cut_by_output_moderation_offers_the_appeal(user, auth_client):
    from conversations.models import Conversation, Message

    conv = Conversation.objects.create(user=user, title="t")
    question = Message.objects.create(conversation=conv, role="user", content="hi")
    answer = Message.objects.create(
        conversation=conv,
        role="assistant",
        content="Partial",
        status=Message.Status.FILTERED,
        parent=question,
    )
    Conversation.objects.filter(pk=conv.pk).update(current_leaf=answer)
    ModerationEvent.objects.create(
        user=user,
        surface="chat",
        direction="output",
        category="weapons",
        score=0.7,
        action="block",
        text="Partial text",
        job_id=str(answer.id),
        backend="keyword",
    )
    page = auth_client.get(reverse("conversation-detail", args=[conv.id]))
    url = reverse("moderation-answer-appeal", args=[answer.id])
    assert f'data-appeal-url="{url}"' in page.content.decode()
    assert auth_client.post(url).status_code == 201
    assert Appeal.objects.get().event.direction == "output"
    from django.test import Client

    stranger = Client()
    stranger.force_login(make_user("mallory"))
    assert stranger.post(url).status_code == 404
