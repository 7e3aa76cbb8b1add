"""Continue an answer that was cut short, in place: one answer, one message
(conversations/services/turns/run.py turn_continue, the recorder's adding settle,
the engines' open final message)."""

import asyncio
import threading

import pytest
from django.urls import reverse

from conversations import services
from conversations.models import Conversation, Message
from gateway.models import UsageRecord
from inference import client as inference_client
from inference import params as inference_params
from inference.engines.scripted import ScriptedEngine
from tests.sse import asgi_sse, session_cookie

pytestmark = pytest.mark.django_db(transaction=True)

TEXT = "one two three four five six seven eight"


def _settle(client, turn) -> list:
    url = reverse(
        "message-stream", args=[turn.conversation.id, turn.assistant_message.id]
    )
    result = asyncio.run(asgi_sse(url, cookie=session_cookie(client)))
    assert result.completed
    return result


def _cut_answer(client, user) -> Message:
    """A conversation whose answer hit its length limit after three words."""
    turn = services.turn_start(
        user=user, content="Count for me", params={"max_tokens": 3}
    )
    _settle(client, turn)
    answer = Message.objects.get(id=turn.assistant_message.id)
    assert answer.finish_reason == "length" and answer.content == "one two three"
    return answer


def test_continue_extends_the_same_answer_without_a_user_message(
    start_worker, auth_client, user
):
    start_worker(ScriptedEngine(text=TEXT))
    answer = _cut_answer(auth_client, user)
    captured = {}
    original = inference_client.job_enqueue

    def spy(*, pool, job, **options):
        captured["job"] = job
        return original(pool=pool, job=job, **options)

    inference_client.job_enqueue = spy
    try:
        turn = services.turn_continue(
            user=user, conversation_id=answer.conversation_id, message_id=answer.id
        )
    finally:
        inference_client.job_enqueue = original
    assert turn.assistant_message.id == answer.id
    # the prompt: the history, then the answer so far as the start of the
    # assistant's turn, and the engine told to write on from it
    job = captured["job"]
    assert job.job_id != str(answer.id)
    assert [(m["role"], m["content"]) for m in job.messages[-2:]] == [
        ("user", "Count for me"),
        ("assistant", "one two three"),
    ]
    assert job.params[inference_params.CONTINUE] is True
    result = _settle(auth_client, turn)
    assert result.text == " four five six seven eight"
    done = result.last("done")
    assert done.data["message_id"] == str(answer.id)
    assert done.data["finish_reason"] == "stop"
    answer.refresh_from_db()
    assert answer.content == TEXT
    assert answer.status == Message.Status.COMPLETE
    assert answer.token_count == 3 + 5  # the counts add up
    conversation = Conversation.objects.get(id=answer.conversation_id)
    assert [m.role for m in conversation.messages.all()] == ["user", "assistant"]
    assert conversation.current_leaf_id == answer.id
    # each generation is billed on its own usage record, both for this answer
    records = UsageRecord.objects.filter(message_id=answer.id)
    assert sorted(r.completion_tokens for r in records) == [3, 5]
    # the export holds the one answer, whole
    export = auth_client.get(
        reverse("conversation-export", args=[answer.conversation_id]),
        {"format": "md"},
    ).content.decode()
    assert TEXT in export and export.count("one two three") == 1


def test_continue_through_the_view_streams_into_the_same_message(
    start_worker, auth_client, user
):
    start_worker(ScriptedEngine(text=TEXT))
    answer = _cut_answer(auth_client, user)
    url = reverse("message-continue", args=[answer.conversation_id, answer.id])
    response = auth_client.post(url)
    assert response.status_code == 201
    body = response.json()
    assert body["assistant_message"]["id"] == str(answer.id)
    result = asyncio.run(
        asgi_sse(
            body["assistant_message"]["stream_url"],
            cookie=session_cookie(auth_client),
        )
    )
    assert result.text == " four five six seven eight"
    assert TEXT in result.last("done").data["html"]
    assert Message.objects.get(id=answer.id).content == TEXT


def test_stopping_a_continuation_keeps_what_was_shown(start_worker, auth_client, user):
    start_worker(ScriptedEngine(text=TEXT))
    answer = _cut_answer(auth_client, user)
    services.turn_continue(
        user=user,
        conversation_id=answer.conversation_id,
        message_id=answer.id,
        params={"script": {"text": "word ", "cycle": True, "delay_ms": 10}},
    )
    stop_url = reverse("message-stop", args=[answer.conversation_id, answer.id])
    stopped = {}

    def press_stop():
        stopped["status"] = auth_client.post(stop_url).status_code

    def watch(result):
        if sum(e.event == "token" for e in result.events) >= 3 and not stopped:
            stopped["thread"] = threading.Thread(target=press_stop)
            stopped["thread"].start()
        return False

    url = reverse("message-stream", args=[answer.conversation_id, answer.id])
    result = asyncio.run(
        asgi_sse(url, cookie=session_cookie(auth_client), stop_when=watch)
    )
    stopped["thread"].join()
    assert stopped["status"] == 202
    assert result.last("done").data["status"] == "cancelled"
    answer.refresh_from_db()
    assert answer.status == Message.Status.CANCELLED
    assert answer.content == "one two three" + result.text
    assert result.text.startswith("word word word")
    # a stopped answer can be continued again
    again = services.turn_continue(
        user=user,
        conversation_id=answer.conversation_id,
        message_id=answer.id,
        params={"script": {"text": " end"}},
    )
    _settle(auth_client, again)
    answer.refresh_from_db()
    assert answer.content == "one two three" + result.text + " end"
    assert answer.status == Message.Status.COMPLETE


def test_only_a_cut_short_last_answer_can_be_continued(
    start_worker, auth_client, user, other_user
):
    start_worker(ScriptedEngine(text="Done."))
    turn = services.turn_start(user=user, content="Hi")
    _settle(auth_client, turn)
    complete = turn.assistant_message
    url = reverse("message-continue", args=[turn.conversation.id, complete.id])
    refused = auth_client.post(url)
    assert refused.status_code == 400
    assert refused.json()["error"]["code"] == "not_continuable"
    question = turn.user_message
    url = reverse("message-continue", args=[turn.conversation.id, question.id])
    assert auth_client.post(url).status_code == 400
    # another user's answer is a 404
    from django.test import Client

    other = Client()
    other.force_login(other_user)
    url = reverse("message-continue", args=[turn.conversation.id, complete.id])
    assert other.post(url).status_code == 404


def test_an_answer_with_a_reply_cannot_be_continued(start_worker, auth_client, user):
    start_worker(ScriptedEngine(text=TEXT))
    answer = _cut_answer(auth_client, user)
    reply = services.turn_start(
        user=user,
        content="Thanks",
        conversation_id=answer.conversation_id,
        params={"max_tokens": 2},
    )
    _settle(auth_client, reply)
    url = reverse("message-continue", args=[answer.conversation_id, answer.id])
    refused = auth_client.post(url)
    assert refused.status_code == 409
    assert refused.json()["error"]["code"] == "not_continuable"
    assert Message.objects.get(id=answer.id).content == "one two three"


def test_moderation_screens_the_whole_continued_answer(
    start_worker, auth_client, user, settings
):
    # "bad" spans the join: the first part ends "ba", the continuation starts "d";
    # neither part alone holds it (HoldAndCut cuts where "bad" starts)
    settings.GATEWAY_STREAM_POLICIES = [
        "tests.gateway.test_generations_policy.HoldAndCut"
    ]
    start_worker(ScriptedEngine(text="alpha bad omega", chunk_bytes=8))
    turn = services.turn_start(user=user, content="Say it", params={"max_tokens": 1})
    _settle(auth_client, turn)
    answer = Message.objects.get(id=turn.assistant_message.id)
    assert answer.content == "alpha ba" and answer.finish_reason == "length"
    again = services.turn_continue(
        user=user, conversation_id=answer.conversation_id, message_id=answer.id
    )
    result = _settle(auth_client, again)
    assert "bad" not in result.text and "omega" not in result.text
    assert result.last("done").data["finish_reason"] == "content_filter"
    answer.refresh_from_db()
    assert answer.status == Message.Status.FILTERED
    assert answer.content == "alpha ba"  # what was shown before stays


def test_the_reaper_settles_a_continuation_nobody_followed(
    start_worker, auth_client, user
):
    from tests.inference.helpers import terminal, wait_events

    start_worker(ScriptedEngine(text=TEXT))
    answer = _cut_answer(auth_client, user)
    services.turn_continue(
        user=user, conversation_id=answer.conversation_id, message_id=answer.id
    )
    answer.refresh_from_db()
    assert answer.status == Message.Status.STREAMING
    assert answer.content == "one two three"  # shown while it streams again
    wait_events(answer.job_id, terminal)
    assert services.streaming_messages_reap(older_than_s=0) == 1
    answer.refresh_from_db()
    assert answer.content == TEXT and answer.status == Message.Status.COMPLETE
