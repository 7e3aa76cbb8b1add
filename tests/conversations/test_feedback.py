"""Feedback on answers (conversations/services/feedback.py, the JSON endpoint, the
admin views, /metrics and export_feedback), against the real database."""

from __future__ import annotations

import csv
import io
import json
from decimal import Decimal

import pytest
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from conversations.models import Conversation, Feedback, Message
from gateway.models import UsageRecord
from inference.metrics import metrics_render
from tests.gateway import factories

pytestmark = pytest.mark.django_db


@pytest.fixture
def thread(user):
    """A conversation of ``user``: a question and two answer versions (regenerated)."""
    conv = Conversation.objects.create(user=user, title="Capitals")
    question = Message.objects.create(
        conversation=conv, role=Message.Role.USER, content="Capital of France?"
    )
    first = Message.objects.create(
        conversation=conv,
        role=Message.Role.ASSISTANT,
        parent=question,
        content="Lyon.",
        model="tiny-1",
        pool="small",
        ttft_ms=120,
        prompt_tokens=31,
        token_count=3,
    )
    second = Message.objects.create(
        conversation=conv,
        role=Message.Role.ASSISTANT,
        parent=question,
        content="Paris.",
        model="large-1",
        pool="big",
        ttft_ms=340,
        prompt_tokens=31,
        token_count=2,
    )
    return conv, question, first, second


def url(conv, message):
    return reverse("message-feedback", args=[conv.id, message.id])


def rate(client, conv, message, **fields):
    return client.post(
        url(conv, message),
        data=json.dumps(fields),
        content_type="application/json",
    )


def test_changing_the_rating_replaces_reason_and_comment(auth_client, thread):
    conv, _q, first, _second = thread
    response = rate(
        auth_client, conv, first, rating="down", reason="wrong", comment="Not Lyon"
    )
    assert response.status_code == 200, response.content
    response = rate(auth_client, conv, first, rating="up")
    assert response.status_code == 200
    assert response.json() == {
        "message_id": str(first.id),
        "rating": "up",
        "reason": "",
        "comment": "",
    }
    row = Feedback.objects.get()
    assert (row.rating, row.reason, row.comment) == ("up", "", "")


def test_each_answer_version_keeps_its_own_feedback(auth_client, thread):
    conv, _q, first, second = thread
    rate(auth_client, conv, first, rating="down", reason="wrong")
    rate(auth_client, conv, second, rating="up", reason="accurate")
    got = {f.message_id: (f.rating, f.reason, f.model) for f in Feedback.objects.all()}
    assert got == {
        first.id: ("down", "wrong", "tiny-1"),
        second.id: ("up", "accurate", "large-1"),
    }


def test_feedback_is_stored_with_the_answers_pool_model_plan_ttft_and_tokens(
    auth_client, user, thread
):
    conv, _q, _first, second = thread
    factories.subscribe(user, factories.plan("pro", priority=5))
    UsageRecord.objects.create(
        user=user,
        pool="big",
        model="large-1",
        prompt_tokens=31,
        completion_tokens=2,
        cost=Decimal("0.01"),
        status=UsageRecord.Status.COMPLETE,
        job_id=str(second.id),
        message_id=second.id,
    )
    rate(auth_client, conv, second, rating="up", comment="  short and right  ")
    row = Feedback.objects.get()
    assert (row.pool, row.model, row.plan) == ("big", "large-1", "pro")
    assert (row.ttft_ms, row.prompt_tokens, row.completion_tokens) == (340, 31, 2)
    assert row.comment == "short and right"


def test_another_users_answer_is_a_404_and_nothing_is_stored(other_user, thread):
    conv, _q, first, _second = thread
    client = Client()
    client.force_login(other_user)
    assert rate(client, conv, first, rating="up").status_code == 404
    assert client.delete(url(conv, first)).status_code == 404
    assert not Feedback.objects.exists()


@pytest.mark.parametrize(
    ("fields", "code"),
    [
        ({"rating": "meh"}, "invalid_rating"),
        ({}, "invalid_rating"),
        ({"rating": "up", "reason": "wrong"}, "invalid_reason"),
        ({"rating": "down", "reason": "nonsense"}, "invalid_reason"),
        ({"rating": "down", "comment": "x" * 2001}, "comment_too_long"),
    ],
)
def test_bad_input_is_a_clear_400_and_stores_nothing(auth_client, thread, fields, code):
    conv, _q, first, _second = thread
    response = rate(auth_client, conv, first, **fields)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == code
    assert response.json()["error"]["message"]
    assert not Feedback.objects.exists()


def test_a_user_message_cannot_be_rated(auth_client, thread):
    conv, question, _first, _second = thread
    assert rate(auth_client, conv, question, rating="up").status_code == 404


def test_a_form_post_works_and_delete_removes_the_rating(auth_client, thread):
    conv, _q, first, _second = thread
    response = auth_client.post(
        url(conv, first), {"rating": "down", "reason": "format"}
    )
    assert response.status_code == 200
    assert Feedback.objects.get().reason == "format"
    response = auth_client.delete(url(conv, first))
    assert response.json()["removed"] is True
    assert not Feedback.objects.exists()


def test_the_endpoint_requires_the_csrf_token(user, thread):
    conv, _q, first, _second = thread
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    assert rate(client, conv, first, rating="up").status_code == 403


def test_feedback_is_counted_by_model_and_rating_in_metrics(
    auth_client, thread, django_capture_on_commit_callbacks
):
    conv, _q, first, second = thread

    def sample() -> float:
        body = metrics_render()[0].decode()
        line = next(
            (
                row
                for row in body.splitlines()
                if row.startswith("chatsite:feedback_total{")
                and 'model_name="large-1"' in row
                and 'rating="up"' in row
            ),
            None,
        )
        return float(line.rsplit(" ", 1)[1]) if line else 0.0

    before = sample()
    with django_capture_on_commit_callbacks(execute=True):
        rate(auth_client, conv, second, rating="up")
    with django_capture_on_commit_callbacks(execute=True):
        rate(auth_client, conv, first, rating="up")  # another model
    assert sample() == before + 1


def test_export_feedback_writes_jsonl_and_csv_since_a_date(
    auth_client, thread, tmp_path
):
    conv, _q, first, second = thread
    rate(auth_client, conv, first, rating="down", reason="wrong", comment="Lyon?")
    rate(auth_client, conv, second, rating="up")
    out = io.StringIO()
    call_command("export_feedback", stdout=out)
    rows = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [(r["answer"], r["rating"], r["question"]) for r in rows] == [
        ("Lyon.", "down", "Capital of France?"),
        ("Paris.", "up", "Capital of France?"),
    ]
    target = tmp_path / "feedback.csv"
    call_command(
        "export_feedback", format="csv", output=str(target), stderr=io.StringIO()
    )
    table = list(csv.DictReader(target.open()))
    assert [r["reason"] for r in table] == ["wrong", ""]
    out = io.StringIO()
    call_command("export_feedback", since="2999-01-01", stdout=out)
    assert out.getvalue() == ""


def test_export_feedback_refuses_a_bad_date():
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="not a date"):
        call_command("export_feedback", since="yesterday")


def test_admin_lists_feedback_and_shows_satisfaction_per_model(
    admin_client, auth_client, thread
):
    conv, _q, first, second = thread
    rate(auth_client, conv, first, rating="down", reason="wrong")
    rate(auth_client, conv, second, rating="up")
    listing = admin_client.get(
        reverse("admin:conversations_feedback_changelist"), {"rating__exact": "down"}
    )
    assert listing.status_code == 200
    assert [f.model for f in listing.context["cl"].result_list] == ["tiny-1"]
    body = listing.content.decode()
    assert reverse("admin:conversations_conversation_change", args=[conv.id]) in body
    page = admin_client.get(reverse("admin:conversations_feedback_satisfaction"))
    assert page.status_code == 200
    rows = page.context["rows"]
    assert {(r["model"], r["up"], r["down"], r["share_up"]) for r in rows} == {
        ("tiny-1", 0, 1, 0.0),
        ("large-1", 1, 0, 1.0),
    }
    empty = admin_client.get(
        reverse("admin:conversations_feedback_satisfaction"), {"end": "2000-01-01"}
    )
    assert "No feedback in this period" in empty.content.decode()


def test_the_page_shows_the_stored_rating_after_a_reload(auth_client, thread):
    conv, _q, _first, second = thread
    rate(auth_client, conv, second, rating="down", reason="wrong")
    page = auth_client.get(reverse("conversation-detail", args=[conv.id]))
    html = page.content.decode()
    box = html[html.index(url(conv, second)) :]
    assert 'data-rating="down" aria-pressed="true"' in box[:600]
    assert 'data-rating="up" aria-pressed="false"' in box[:600]


def test_a_streaming_answer_has_hidden_thumbs(auth_client, thread):
    conv, _q, _first, second = thread
    Message.objects.filter(id=second.id).update(status=Message.Status.STREAMING)
    page = auth_client.get(reverse("conversation-detail", args=[conv.id])).content
    html = page.decode()
    at = html.index(f'data-feedback-url="{url(conv, second)}"')
    assert html[at:].split(">")[0].endswith(" hidden")
