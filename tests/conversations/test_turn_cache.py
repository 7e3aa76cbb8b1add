"""Chat turns and the gateway's answer caches (conversations/services/turns/,
gateway.cache): a turn at CHAT_TEMPERATURE uses them only when the user turned on
"Reuse cached answers"; a cached answer is marked on the message (live and after a
reload). Through the real views, ASGI SSE relay, Redis, PostgreSQL and a worker."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from conversations.models import Message
from gateway import services as gateway_services
from gateway.models import SemanticCacheEntry, UsageRecord
from inference import keys
from inference.connections import redis_sync
from inference.engines.scripted import ScriptedEngine
from tests.conftest import make_user
from tests.sse import SseResult, asgi_sse, session_cookie

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("embedding_worker"),
]

QUESTION = "What is the capital of France?"


def client_for(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def relay(client: Client, body: dict[str, Any]) -> SseResult:
    """Stream a started turn's answer to its end through the ASGI app."""
    return asyncio.run(
        asgi_sse(body["assistant_message"]["stream_url"], cookie=session_cookie(client))
    )


def ask(client: Client, content: str) -> tuple[Message, SseResult]:
    """Send ``content`` in a new conversation (the chat UI's POST) and stream the answer."""
    response = client.post(reverse("message-send-new"), {"content": content})
    assert response.status_code == 201, response.content
    body = response.json()
    result = relay(client, body)
    assert result.completed and result.last("done") is not None
    return Message.objects.get(id=body["assistant_message"]["id"]), result


def cache_of(result: SseResult) -> str | None:
    """The ``cache`` of a streamed answer's meta event (None: generated)."""
    return result.last("meta").data.get("cache")


def page_of(client: Client, answer: Message) -> str:
    url = reverse("conversation-detail", args=[answer.conversation_id])
    return client.get(url).content.decode()


def test_a_repeated_question_is_generated_again_while_reuse_is_off(
    start_worker, user, enqueued
):
    start_worker(ScriptedEngine(text="Paris."))
    client = client_for(user)
    ask(client, QUESTION)
    answer, result = ask(client, QUESTION)

    assert cache_of(result) is None and result.last("done").data["cache"] == ""
    assert len(enqueued) == 2 and answer.job_id == enqueued[-1]
    assert answer.cache_kind == "" and answer.token_count > 0
    record = UsageRecord.objects.get(job_id=answer.job_id)
    assert not record.cache_hit and record.total_tokens > 0
    # nothing was cached either: the turns never used the caches
    assert not redis_sync().keys(keys.CACHE_KEY_PATTERN)
    assert not SemanticCacheEntry.objects.exists()
    assert 'class="msg-cache"' not in page_of(client, answer)


def test_with_reuse_on_a_repeated_question_is_answered_from_the_exact_cache(
    start_worker, user, enqueued
):
    gateway_services.user_preference_set(user=user, reuse_cached_answers=True)
    start_worker(ScriptedEngine(text="The capital of France is Paris."))
    client = client_for(user)
    first, first_result = ask(client, QUESTION)
    assert cache_of(first_result) is None and first.cache_kind == ""

    answer, result = ask(client, QUESTION)

    assert len(enqueued) == 1  # no job for the second answer
    assert cache_of(result) == "exact"
    assert result.text == "The capital of France is Paris."
    done = result.last("done").data
    assert done["cache"] == "exact" and done["status"] == "complete"
    # the usage of the generation that wrote the answer, its whole prompt cached
    assert done["usage"] == {
        "prompt_tokens": first.prompt_tokens,
        "completion_tokens": first.token_count,
        "cached_tokens": first.prompt_tokens,
    }
    assert answer.cache_kind == Message.CacheKind.EXACT
    assert answer.content == "The capital of France is Paris."
    assert answer.status == Message.Status.COMPLETE
    assert answer.token_count == first.token_count > 0
    record = UsageRecord.objects.get(job_id=answer.job_id)
    assert record.cache_hit and record.total_tokens == 0 and record.cost == 0
    assert not UsageRecord.objects.get(job_id=first.job_id).cache_hit
    # after a reload the answer is still marked, the generated one is not
    page = page_of(client, answer)
    assert page.count('class="msg-cache"') == 1 and 'data-cache="exact"' in page
    assert 'class="msg-cache"' not in page_of(client, first)


def test_another_user_with_reuse_on_never_gets_my_cached_answer(
    start_worker, user, enqueued
):
    bob = make_user("bob")
    for someone in (user, bob):
        gateway_services.user_preference_set(user=someone, reuse_cached_answers=True)
    worker = start_worker(ScriptedEngine(text="Alice's answer."))
    ask(client_for(user), QUESTION)
    worker.stop()
    start_worker(ScriptedEngine(text="Bob's answer."))
    bob_client = client_for(bob)

    answer, result = ask(bob_client, QUESTION)

    assert cache_of(result) is None and result.text == "Bob's answer."
    assert answer.cache_kind == "" and len(enqueued) == 2
    assert not UsageRecord.objects.get(job_id=answer.job_id).cache_hit
    # control: bob's own answer is cached for him
    again, again_result = ask(bob_client, QUESTION)
    assert cache_of(again_result) == "exact" and again.content == "Bob's answer."
    assert len(enqueued) == 2


def test_regenerate_writes_a_new_answer_with_reuse_on(start_worker, user, enqueued):
    gateway_services.user_preference_set(user=user, reuse_cached_answers=True)
    start_worker(ScriptedEngine(text="Paris."))
    client = client_for(user)
    ask(client, QUESTION)
    cached, _ = ask(client, QUESTION)
    assert cached.cache_kind == "exact" and len(enqueued) == 1

    response = client.post(reverse("message-regenerate", args=[cached.conversation_id]))
    assert response.status_code == 201
    result = relay(client, response.json())

    assert cache_of(result) is None and len(enqueued) == 2
    regenerated = Message.objects.get(id=response.json()["assistant_message"]["id"])
    assert regenerated.cache_kind == "" and regenerated.token_count > 0
    assert not UsageRecord.objects.get(job_id=regenerated.job_id).cache_hit


def test_with_reuse_on_a_near_identical_first_question_is_a_semantic_hit(
    start_worker, user, enqueued, settings
):
    settings.GATEWAY_SEMANTIC_CACHE_MIN_SIMILARITY = 0.9
    gateway_services.user_preference_set(user=user, reuse_cached_answers=True)
    start_worker(ScriptedEngine(text="Paris."))
    client = client_for(user)
    ask(client, QUESTION)

    answer, result = ask(client, "What's the capital city of France?")

    assert cache_of(result) == "semantic" and result.text == "Paris."
    assert answer.cache_kind == Message.CacheKind.SEMANTIC and len(enqueued) == 1
    assert UsageRecord.objects.get(job_id=answer.job_id).cache_hit
    assert 'data-cache="semantic"' in page_of(client, answer)
