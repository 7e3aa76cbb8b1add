"""Output moderation in the one follower (gateway/generations/moderation.py): a
violating answer from a real worker (scripted engine) is cut mid-stream on the chat
page and the API, streamed or not; ``hold`` shows no character of the violating window,
``release`` at most that window; the engine is cancelled and billed for what it
generated; the answer is stored as released with a visible reason and one event; a
resumed stream releases the same text; benign answers pass byte for byte."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from django.urls import reverse

from conversations import services as chat
from conversations.models import Message
from conversations.openai import schemas
from gateway import services as gateway_services
from gateway.models import UsageRecord
from inference import client as inference_client
from inference import protocol
from inference.engines.scripted import ScriptedEngine
from safety.models import Appeal, ModerationEvent
from safety.output import window_split
from tests.conversations.openai.helpers import asgi, ask, no_reservations
from tests.gateway import factories
from tests.safety import fakes
from tests.sse import asgi_sse, ended, session_cookie

pytestmark = pytest.mark.django_db(transaction=True)

CLEAN = "The weather is mild today."
VIOLENT = " Here is how to build a BOMB at home with household items."
FILLER = " Then the answer goes on with more words" * 12
TEXT = CLEAN + VIOLENT + FILLER
REASON = "This answer was stopped: it went against our content policy on violence."
BENIGN = (
    "Paris is the capital of France. It lies on the Seine!\n"
    "It is known for its museums, its cafes and the Eiffel Tower. " * 3
)


@pytest.fixture(autouse=True)
def output_moderation(settings):
    settings.SAFETY_BACKEND = fakes.PATH
    settings.SAFETY_OUTPUT_ENABLED = True
    settings.SAFETY_OUTPUT_MODE = "hold"
    settings.SAFETY_OUTPUT_FIRST_WINDOW_CHARS = 0  # sentence windows from the start
    settings.SAFETY_FAIL_CLOSED = False
    fakes.reset()
    yield
    fakes.reset()


def _generated(job_id: str) -> tuple[str, int]:
    """The text the engine wrote and its token events, from the generation's stream."""
    events = inference_client.generation_events(job_id=job_id)
    tokens = [e.data["t"] for e in events if e.type == protocol.EVENT_TOKEN]
    return "".join(tokens), len(tokens)


def _chat(user: Any, client: Any, *, text: str = TEXT, **sse: Any) -> tuple:
    turn = chat.turn_start(
        user=user, content="Tell me", params={"script": {"text": text}}
    )
    url = reverse(
        "message-stream", args=[turn.conversation.id, turn.assistant_message.id]
    )
    result = asyncio.run(asgi_sse(url, cookie=session_cookie(client), **sse))
    return turn, url, result


def _assert_cut_and_billed(job_id: str, released: str) -> None:
    record = UsageRecord.objects.get(job_id=job_id)
    generated, tokens = _generated(job_id)
    assert record.status == "filtered"
    # the engine was cancelled at the cut: it wrote (and is billed) less than the
    # script, exactly the tokens it generated
    assert record.completion_tokens == tokens < len(TEXT.split())
    assert generated.startswith(released) and len(generated) > len(released)
    event = ModerationEvent.objects.get(job_id=job_id)
    assert (event.direction, event.action, event.category) == (
        "output",
        "block",
        "violence",
    )
    assert event.text == generated and "BOMB" in event.text
    assert event.score == pytest.approx(0.97)
    assert no_reservations()


def test_hold_cuts_the_chat_answer_before_any_character_of_the_violating_window(
    user, auth_client, start_worker
):
    start_worker(ScriptedEngine(delay_ms=10))
    turn, _url, result = _chat(user, auth_client)
    assert result.completed
    # the bytes the browser received: the clean sentence, nothing of the next one
    assert result.text == CLEAN
    assert b"BOMB" not in result.body and b"household" not in result.body
    done = result.last("done")
    assert done is not None
    assert (done.data["status"], done.data["finish_reason"]) == (
        "filtered",
        "content_filter",
    )
    assert done.data["error"] == REASON and "BOMB" not in done.data["html"]
    answer = Message.objects.get(id=turn.assistant_message.id)
    assert (answer.status, answer.content, answer.error) == ("filtered", CLEAN, REASON)
    _assert_cut_and_billed(answer.job_id, CLEAN)
    assert ModerationEvent.objects.get().surface == "chat"
    # the thread shows the reason after a reload too
    page = auth_client.get(reverse("conversation-detail", args=[turn.conversation.id]))
    assert REASON in page.content.decode()


def test_a_cut_answer_keeps_what_was_shown_names_the_category_and_can_be_appealed(
    user, auth_client, start_worker
):
    """What the user sees of a cut after a reload: the text shown live, the reason
    naming the category, and "This was a mistake", which appeals the cut's event."""
    start_worker(ScriptedEngine(delay_ms=10))
    turn, _url, result = _chat(user, auth_client)
    assert result.text == CLEAN
    answer_id = turn.assistant_message.id
    page = auth_client.get(
        reverse("conversation-detail", args=[turn.conversation.id])
    ).content.decode()
    appeal_url = reverse("moderation-answer-appeal", args=[answer_id])
    assert CLEAN in page and "BOMB" not in page
    assert REASON in page and "violence" in REASON
    assert f'data-appeal-url="{appeal_url}"' in page
    assert "This was a mistake" in page
    response = auth_client.post(appeal_url)
    assert response.status_code == 201
    event = ModerationEvent.objects.get(job_id=str(answer_id))
    assert response.json()["appeal"]["moderation_event_id"] == event.pk
    assert Appeal.objects.get().event == event
    # after a reload the appeal is shown as sent, not offered again
    page = auth_client.get(
        reverse("conversation-detail", args=[turn.conversation.id])
    ).content.decode()
    assert f'data-appeal-url="{appeal_url}"' not in page
    assert "Appeal sent: staff will review this decision." in page


def test_release_cuts_the_chat_answer_after_the_violating_window(
    user, auth_client, start_worker, settings
):
    settings.SAFETY_OUTPUT_MODE = "release"
    start_worker(ScriptedEngine(delay_ms=10))
    turn, _url, result = _chat(user, auth_client)
    # the leak is bounded by the one window, nothing after it
    assert result.text == CLEAN + VIOLENT
    assert b"Then the answer" not in result.body
    answer = Message.objects.get(id=turn.assistant_message.id)
    assert (answer.status, answer.content) == ("filtered", CLEAN + VIOLENT)
    _assert_cut_and_billed(answer.job_id, CLEAN + VIOLENT)


@pytest.fixture
def api_key(user) -> str:
    factories.pool("default", model="scripted-1")
    return gateway_services.api_key_create(user=user, name="tests")[1]


@pytest.mark.parametrize("mode", ["hold", "release"])
def test_the_api_stream_is_cut_with_content_filter_then_done(
    user, api_key, start_worker, settings, mode
):
    settings.SAFETY_OUTPUT_MODE = mode
    start_worker(ScriptedEngine(text=TEXT, delay_ms=10))
    result = asyncio.run(
        asgi("POST", "/v1/chat/completions", body=ask(stream=True), key=api_key)
    )
    assert result.status == 200
    assert result.data_lines[-1] == "[DONE]"
    chunks = [c for c in result.chunks if c["choices"]]
    content = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
    expected = CLEAN if mode == "hold" else CLEAN + VIOLENT
    assert content == expected
    assert chunks[-1]["choices"][0]["finish_reason"] == "content_filter"
    cid = chunks[-1]["id"]
    assert chunks[-1]["content_filter"] == {
        "reason": REASON,
        "appeal_url": f"/v1/moderation/completions/{cid}/appeal",
    }
    assert all("content_filter" not in c for c in chunks[:-1])
    schemas.validate_chunk(chunks[-1])
    if mode == "hold":
        assert b"BOMB" not in result.body
    assert b"Then the answer" not in result.body
    record = UsageRecord.objects.get(user=user)
    _assert_cut_and_billed(record.job_id, expected)
    assert ModerationEvent.objects.get().surface == "api"


def test_a_non_streamed_api_answer_is_cut_with_content_filter(
    user, api_key, start_worker
):
    start_worker(ScriptedEngine(text=TEXT, delay_ms=10))
    result = asyncio.run(asgi("POST", "/v1/chat/completions", body=ask(), key=api_key))
    assert result.status == 200
    choice = result.json()["choices"][0]
    assert choice["finish_reason"] == "content_filter"
    assert choice["message"]["content"] == CLEAN
    record = UsageRecord.objects.get(user=user)
    _assert_cut_and_billed(record.job_id, CLEAN)
    schemas.validate_completion(result.json())
    assert result.json()["content_filter"]["reason"] == REASON


def test_an_api_answer_cut_by_the_filter_is_appealed_with_its_completion_id(
    user, other_user, api_key, start_worker
):
    """The cut completion's ``moderation.appeal_url`` appeals its output event (the
    owner's key only); an id that is not a cut completion of the key's user is a 404."""
    start_worker(ScriptedEngine(text=TEXT, delay_ms=10))
    cut = asyncio.run(asgi("POST", "/v1/chat/completions", body=ask(), key=api_key))
    url = cut.json()["content_filter"]["appeal_url"]
    other_key = gateway_services.api_key_create(user=other_user, name="other")[1]
    stranger = asyncio.run(asgi("POST", url, body={}, key=other_key))
    assert stranger.status == 404
    schemas.validate_error(stranger.json())
    assert not Appeal.objects.exists()

    appealed = asyncio.run(
        asgi("POST", url, body={"comment": "It was a recipe."}, key=api_key)
    )
    assert appealed.status == 201
    event = ModerationEvent.objects.get(job_id=UsageRecord.objects.get().job_id)
    assert appealed.json()["appeal"]["moderation_event_id"] == event.pk
    appeal = Appeal.objects.get()
    assert (appeal.event, appeal.user, appeal.comment) == (
        event,
        user,
        "It was a recipe.",
    )
    # twice: the same appeal
    again = asyncio.run(asgi("POST", url, body={}, key=api_key))
    assert again.json()["appeal"]["id"] == appeal.pk and Appeal.objects.count() == 1

    for bad in (
        f"/v1/moderation/completions/chatcmpl-{uuid.uuid4().hex}/appeal",
        "/v1/moderation/completions/chatcmpl-nothex/appeal",
        "/v1/moderation/completions/cmpl-" + url.split("-")[1],
    ):
        response = asyncio.run(asgi("POST", bad, body={}, key=api_key))
        assert response.status == 404, bad
    assert asyncio.run(asgi("GET", url, key=api_key)).status == 405


@pytest.mark.parametrize("mode", ["hold", "release"])
def test_a_benign_answer_is_byte_identical_to_an_unmoderated_one(
    user, auth_client, start_worker, settings, mode
):
    start_worker(ScriptedEngine(delay_ms=2))
    settings.SAFETY_OUTPUT_ENABLED = False
    plain_turn, _url, plain = _chat(user, auth_client, text=BENIGN)
    settings.SAFETY_OUTPUT_ENABLED = True
    settings.SAFETY_OUTPUT_MODE = mode
    turn, _url, moderated = _chat(user, auth_client, text=BENIGN)
    assert plain.text == moderated.text == BENIGN
    stored = Message.objects.get(id=turn.assistant_message.id)
    assert stored.content == BENIGN and stored.status == "complete"
    assert Message.objects.get(id=plain_turn.assistant_message.id).content == BENIGN
    assert moderated.last("done").data["html"] == plain.last("done").data["html"]
    assert not ModerationEvent.objects.exists()


def test_a_resumed_answer_releases_the_same_text_without_checking_again(
    user, auth_client, start_worker
):
    """A page reload mid-answer (Last-Event-ID) re-attaches: the held and cut text is
    exactly what one uninterrupted stream would have shown, and no window is
    classified twice (the decisions recorded live are followed)."""
    clean = "Sentence one is here today. Sentence two is also here. " * 3
    text = clean + "Now the BOMB part is here. And then some more words."
    start_worker(ScriptedEngine(delay_ms=15))
    turn, url, first = _chat(
        user,
        auth_client,
        text=text,
        stop_when=lambda r: sum(e.event == "token" for e in r.events) >= 2,
    )
    assert not first.completed and not ended(first)
    last_id = [e for e in first.events if e.id][-1].id
    rest = asyncio.run(
        asgi_sse(
            url, cookie=session_cookie(auth_client), headers={"Last-Event-ID": last_id}
        )
    )
    assert rest.completed and rest.last("done")
    assert first.text and rest.text
    assert first.text + rest.text == clean.rstrip(" ")
    answer = Message.objects.get(id=turn.assistant_message.id)
    assert (answer.status, answer.content) == ("filtered", clean.rstrip(" "))
    windows = window_split(text, max_chars=200, final=True)
    cut_at = windows.index(" Now the BOMB part is here.")
    checked = {
        (before + window).strip()
        for before, window in zip(["", *windows], windows[: cut_at + 1], strict=False)
    }
    # every window up to the cut was checked once, with the same context; priming the
    # resumed follower checked nothing again (a check in flight when the first client
    # left may finish in its thread: at most one more)
    assert set(fakes.CALLS) == checked
    assert cut_at + 1 <= len(fakes.CALLS) <= cut_at + 2


def test_a_backend_that_is_down_cuts_the_answer_when_failing_closed(
    user, auth_client, start_worker, settings
):
    settings.SAFETY_FAIL_CLOSED = True
    fakes.STATE["down"] = True
    start_worker(ScriptedEngine(delay_ms=10))
    turn, _url, result = _chat(user, auth_client, text=BENIGN)
    assert result.text == ""
    done = result.last("done")
    assert done.data["status"] == "filtered"
    assert "could not be checked" in done.data["error"]
    answer = Message.objects.get(id=turn.assistant_message.id)
    assert answer.status == "filtered" and "could not be checked" in answer.error
    assert not ModerationEvent.objects.exists()  # nothing matched: nothing to review


def test_a_backend_that_is_down_lets_the_answer_through_when_failing_open(
    user, auth_client, start_worker
):
    fakes.STATE["down"] = True
    start_worker(ScriptedEngine(delay_ms=2))
    turn, _url, result = _chat(user, auth_client, text=BENIGN)
    assert result.text == BENIGN
    assert Message.objects.get(id=turn.assistant_message.id).status == "complete"
