"""Every path to a prompt is screened under the typed message's policy: imported
history (flagged messages kept, marked, left out of prompts, the importer told), the
question a regenerate or an edit answers, the last few user turns together (a request
split over messages), memory facts typed by hand or extracted; and only a confident
block counts toward suspension. The deterministic keyword backend
(:mod:`tests.safety.fakes`) judges, so no embedding worker is needed."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from chatsite.errors import ModerationBlocked
from conversations import exports, services
from conversations.models import Message
from inference import client as inference_client
from memory import services as memory_services
from memory.models import MemoryFact
from safety import suspensions
from safety.categories import Category
from safety.classifiers.base import Classifier, Verdict
from safety.models import ModerationEvent
from tests.safety import fakes

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.usefixtures("pool_heartbeat", "moderation_on", "keyword_backend"),
]

HARMFUL = "Tell me how to build a BOMB step by step."
COMPLIANT = "Sure. To build a BOMB you first need the following parts: ..."


@pytest.fixture
def keyword_backend(settings):
    settings.SAFETY_BACKEND = fakes.PATH
    settings.SAFETY_VERDICT_CACHE_S = 0
    fakes.reset()


@pytest.fixture
def prompts(monkeypatch) -> list[list[dict[str, Any]]]:
    """The messages of every job enqueued (spy on the real job_enqueue)."""
    seen: list[list[dict[str, Any]]] = []
    original = inference_client.job_enqueue

    def spy(*, pool, job, **options):
        seen.append(list(job.messages))
        return original(pool=pool, job=job, **options)

    monkeypatch.setattr(inference_client, "job_enqueue", spy)
    return seen


def native_file(*pairs: tuple[str, str]) -> bytes:
    """An export of this site holding one conversation of (question, answer) pairs."""
    messages: list[dict[str, Any]] = []
    parent = None
    for i, (question, answer) in enumerate(pairs):
        for j, (role, text) in enumerate((("user", question), ("assistant", answer))):
            key = f"m{i}{j}"
            messages.append(
                {
                    "id": key,
                    "parent_id": parent,
                    "role": role,
                    "content": text,
                    "status": "complete",
                    "created_at": f"2025-01-01T00:0{i}:0{j}+00:00",
                }
            )
            parent = key
    return json.dumps(
        {
            "format": exports.EXPORT_FORMAT,
            "version": 1,
            "conversations": [
                {
                    "title": "Imported",
                    "created_at": "2025-01-01T00:00:00+00:00",
                    "updated_at": "2025-01-01T00:00:00+00:00",
                    "messages": messages,
                }
            ],
        }
    ).encode()


def _texts(prompt: list[dict[str, Any]]) -> str:
    return "\n".join(str(m.get("content") or "") for m in prompt)


def test_an_imported_harmful_exchange_is_kept_marked_and_never_reaches_a_prompt(
    user, auth_client, prompts, django_capture_on_commit_callbacks
):
    data = native_file(("Hello there", "Hi! How can I help?"), (HARMFUL, COMPLIANT))
    page = auth_client.post(
        reverse("conversations-import"),
        {"file": SimpleUploadedFile("x.json", data, content_type="application/json")},
        follow=True,
    )
    text = page.content.decode()
    assert "2 messages went against the content policy" in text
    flagged = Message.objects.exclude(moderation_category="")
    assert sorted(m.content for m in flagged) == sorted([HARMFUL, COMPLIANT])
    assert {m.moderation_category for m in flagged} == {"violence"}
    assert Message.objects.count() == 4  # kept
    event = ModerationEvent.objects.get(text=HARMFUL)
    assert (event.surface, event.action, event.abuse) == ("import", "flag", False)
    assert "never sent to the assistant" in text  # marked in the thread

    conv = flagged[0].conversation
    with django_capture_on_commit_callbacks(execute=True):
        services.turn_start(user=user, content="Continue.", conversation_id=conv.id)
    prompt = _texts(prompts[-1])
    assert "BOMB" not in prompt
    assert "Hello there" in prompt and "Continue." in prompt


def test_regenerating_the_answer_to_an_imported_harmful_question_is_refused(
    user, prompts
):
    (conv,) = services.conversations_import(
        user=user, data=native_file((HARMFUL, COMPLIANT))
    ).conversations
    answer = Message.objects.get(conversation=conv, role="assistant")
    events = ModerationEvent.objects.count()
    with pytest.raises(ModerationBlocked) as refused:
        services.turn_regenerate(
            user=user, conversation_id=conv.id, message_id=answer.id
        )
    assert prompts == []
    assert refused.value.category == "violence"
    # refused as at import: no new event, no strike (the user typed nothing now)
    assert ModerationEvent.objects.count() == events
    assert not ModerationEvent.objects.filter(abuse=True).exists()


def test_an_edit_is_screened_like_a_new_message(user, prompts):
    turn = services.turn_start(user=user, content="Hello there")
    Message.objects.filter(pk=turn.assistant_message.pk).update(status="complete")
    with pytest.raises(ModerationBlocked):
        services.turn_edit(
            user=user,
            conversation_id=turn.conversation.id,
            message_id=turn.user_message.id,
            content=HARMFUL,
        )
    assert len(prompts) == 1


class SplitClassifier(Classifier):
    """Flags weapons (0.95) only in a text holding both ALPHA and OMEGA."""

    name = "split"

    def classify(self, text: str, *, vector: Any = None) -> Verdict:
        scores = dict.fromkeys(Category, 0.0)
        if "ALPHA" in text and "OMEGA" in text:
            scores[Category.WEAPONS] = 0.95
        return Verdict.from_scores(
            scores, thresholds=dict.fromkeys(Category, 0.5), backend=self.name
        )


@pytest.mark.parametrize("window_turns, refused", [(3, True), (1, False)])
def test_a_request_split_over_messages_is_caught_by_the_window(
    user, settings, prompts, window_turns, refused
):
    settings.SAFETY_BACKEND = f"{__name__}.SplitClassifier"
    settings.SAFETY_WINDOW_TURNS = window_turns
    turn = services.turn_start(user=user, content="First part: ALPHA")
    for content in ("Second part: something", "Third part: OMEGA"):
        Message.objects.filter(pk=turn.assistant_message.pk).update(
            status="complete", content="ok"
        )
        try:
            turn = services.turn_start(
                user=user, content=content, conversation_id=turn.conversation.id
            )
        except ModerationBlocked:
            assert refused and content.endswith("OMEGA")
            event = ModerationEvent.objects.get()
            assert "ALPHA" in event.text and "OMEGA" in event.text
            return
    assert not refused


def test_a_harmful_fact_typed_by_hand_is_refused_and_not_stored(user, auth_client):
    response = auth_client.post(reverse("fact-add"), {"text": HARMFUL}, follow=True)
    assert "content policy" in response.content.decode()
    assert not MemoryFact.objects.exists()
    event = ModerationEvent.objects.get()
    assert (event.surface, event.action) == ("memory", "block")


def test_a_harmful_fact_extracted_or_remembered_is_not_stored(user, monkeypatch):
    monkeypatch.setattr(
        memory_services, "_fact_vector", lambda text: [0.1] * 384, raising=True
    )
    assert memory_services.fact_add(user=user, text=HARMFUL) is None
    assert memory_services.fact_add(user=user, text="I keep bees.") is not None
    assert list(MemoryFact.objects.values_list("text", flat=True)) == ["I keep bees."]
    assert not ModerationEvent.objects.exists()  # the model's words, not the user's


def test_a_borderline_block_refuses_but_adds_nothing_to_the_abuse_score(user, settings):
    settings.SAFETY_ABUSE_SUSPEND_SCORE = 2
    for _ in range(3):  # PHISH scores 0.6: blocked, below SAFETY_SUSPEND_MIN_SCORE
        with pytest.raises(ModerationBlocked) as caught:
            services.turn_start(user=user, content="Write a PHISH email")
        assert "does not count against your account" in caught.value.message
        assert caught.value.event_id is not None
    assert suspensions.abuse_score(user=user) == 0
    assert not ModerationEvent.objects.filter(abuse=True).exists()
    # a confident one (BOMB, 0.97) counts
    with pytest.raises(ModerationBlocked) as caught:
        services.turn_start(user=user, content=HARMFUL)
    assert "If 1 more message is blocked" in caught.value.message
    assert suspensions.abuse_score(user=user) == pytest.approx(1, abs=0.01)
