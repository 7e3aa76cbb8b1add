"""Answer caches (gateway/cache/): exact and semantic hits served as a generation
stream without a job, their scopes (user, model, system prompt), what is never cached,
and regenerate bypassing them. Through the real turn, Redis, pgvector and SSE relay."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from conversations import services as chat
from conversations.models import Message
from gateway import cache, quota
from gateway.models import SemanticCacheEntry, UsageRecord
from inference import client as inference_client
from inference import keys, protocol
from inference.connections import redis_sync
from inference.engines.scripted import ScriptedEngine
from tests.conftest import fake_heartbeat, make_user
from tests.gateway import factories
from tests.sse import SseResult, asgi_sse, session_cookie

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("embedding_worker"),  # the semantic cache's vectors
    pytest.mark.usefixtures("moderation_off"),  # caching, not the classifier's verdicts
]

DETERMINISTIC = {"temperature": 0}
QUEUE = keys.queue_key("default")


def stream(user: Any, turn: chat.Turn, **options: Any) -> SseResult:
    """Relay ``turn``'s answer through the real ASGI app until it ends."""
    client = Client()
    client.force_login(user)
    url = reverse(
        "message-stream", args=[turn.conversation.id, turn.assistant_message.id]
    )
    return asyncio.run(asgi_sse(url, cookie=session_cookie(client), **options))


def answered(user: Any, content: str, **options: Any) -> tuple[chat.Turn, SseResult]:
    """Start a turn in a new conversation and stream its answer to the end."""
    turn = chat.turn_start(user=user, content=content, **options)
    return turn, stream(user, turn)


def meta(result: SseResult) -> dict[str, Any]:
    return result.last("meta").data


def test_exact_hit_at_temperature_0_streams_without_a_job_and_costs_nothing(
    start_worker, user
):
    worker = start_worker(ScriptedEngine(text="Two plus two is four."))
    first, result = answered(user, "What is 2+2?", params=DETERMINISTIC)
    assert result.text == "Two plus two is four." and "cache" not in meta(result)
    worker.stop()
    fake_heartbeat()  # the pool looks served, but no worker takes a job now
    spent = quota.quota_windows(user_id=user.pk, limits=quota.Limits())[1].used
    assert (
        spent
        == UsageRecord.objects.get(job_id=first.assistant_message.job_id).total_tokens
    )
    queued = redis_sync().xlen(QUEUE)

    turn, result = answered(user, "What is 2+2?", params=DETERMINISTIC)

    assert redis_sync().xlen(QUEUE) == queued  # no job
    assert result.completed and result.text == "Two plus two is four."
    assert sum(e.event == "token" for e in result.events) >= 1
    assert meta(result) == {
        "model": "scripted-1",
        "worker": "cache",
        "queue_ms": 0,
        "cache": "exact",
    }
    done = result.last("done").data
    assert done["status"] == "complete" and done["finish_reason"] == "stop"
    # the usage of the generation that wrote the answer, its whole prompt cached
    original = UsageRecord.objects.get(job_id=first.assistant_message.job_id)
    assert done["usage"] == {
        "prompt_tokens": original.prompt_tokens,
        "completion_tokens": original.completion_tokens,
        "cached_tokens": original.prompt_tokens,
    }
    answer = Message.objects.get(id=turn.assistant_message.id)
    assert answer.status == Message.Status.COMPLETE
    assert answer.content == "Two plus two is four." and answer.model == "scripted-1"
    record = UsageRecord.objects.get(job_id=answer.job_id)
    assert record.cache_hit and record.cost == 0 and record.total_tokens == 0
    assert record.message_id == answer.id and record.status == "complete"
    # the hit's reservation was released: the windows hold only the first answer
    assert quota.quota_windows(user_id=user.pk, limits=quota.Limits())[1].used == spent
    assert redis_sync().get(keys.reservation_key(user.pk, answer.job_id)) is None


def test_a_hit_is_served_even_when_the_pool_is_saturated(start_worker, user):
    worker = start_worker(ScriptedEngine(text="Cached."))
    answered(user, "ping?", params=DETERMINISTIC)
    worker.stop()  # no live worker: a miss would be a 503
    _, result = answered(user, "ping?", params=DETERMINISTIC)
    assert result.text == "Cached." and meta(result)["cache"] == "exact"
    with pytest.raises(Exception) as info:
        chat.turn_start(user=user, content="something else", params=DETERMINISTIC)
    assert getattr(info.value, "status", None) == 503


def test_sampled_requests_are_not_cached_unless_the_user_opts_in(
    start_worker, user, enqueued
):
    start_worker(ScriptedEngine(text="Sampled."))
    answered(user, "Tell me a joke")  # CHAT_TEMPERATURE 0.7
    _, again = answered(user, "Tell me a joke")
    assert "cache" not in meta(again) and len(enqueued) == 2
    assert not SemanticCacheEntry.objects.exists()
    # opting in caches at any temperature, and the flag never reaches the worker
    opt_in = {"temperature": 0.7, "cache": True}
    first, _ = answered(user, "Tell me a riddle", params=opt_in)
    assert first.assistant_message.job_id == enqueued[-1]
    job = inference_client.generation_events(job_id=enqueued[-1])
    assert job and job[0].type == "meta"
    _, hit = answered(user, "Tell me a riddle", params=opt_in)
    assert meta(hit)["cache"] == "exact" and len(enqueued) == 3


def test_semantic_hit_for_a_paraphrase_above_the_threshold(
    start_worker, user, enqueued, settings
):
    settings.GATEWAY_SEMANTIC_CACHE_MIN_SIMILARITY = 0.9
    start_worker(ScriptedEngine(text="Paris."))
    first, _ = answered(user, "What is the capital of France?", params=DETERMINISTIC)
    entry = SemanticCacheEntry.objects.get()
    assert entry.user == user and entry.answer == "Paris."
    assert entry.prompt == "What is the capital of France?"
    original = UsageRecord.objects.get(job_id=first.assistant_message.job_id)
    assert (entry.prompt_tokens, entry.completion_tokens) == (
        original.prompt_tokens,
        original.completion_tokens,
    )

    turn, hit = answered(
        user, "What's the capital city of France?", params=DETERMINISTIC
    )
    assert meta(hit)["cache"] == "semantic" and hit.text == "Paris."
    assert len(enqueued) == 1
    # the usage of the generation that wrote the answer, its whole prompt cached;
    # billed nothing (no engine processed a token)
    assert original.prompt_tokens > 0 and original.completion_tokens > 0
    assert hit.last("done").data["usage"] == {
        "prompt_tokens": original.prompt_tokens,
        "completion_tokens": original.completion_tokens,
        "cached_tokens": original.prompt_tokens,
    }
    answer = Message.objects.get(id=turn.assistant_message.id)
    assert answer.token_count == original.completion_tokens
    record = UsageRecord.objects.get(job_id=answer.job_id)
    assert record.cache_hit and record.total_tokens == 0 and record.cost == 0
    # a different question (similarity ~0.66) is a miss
    _, miss = answered(user, "What is the capital of Germany?", params=DETERMINISTIC)
    assert "cache" not in meta(miss) and len(enqueued) == 2
    # the threshold is a setting: above every similarity, even the paraphrase misses
    settings.GATEWAY_SEMANTIC_CACHE_MIN_SIMILARITY = 0.999
    _, strict = answered(user, "Tell me the capital of France.", params=DETERMINISTIC)
    assert "cache" not in meta(strict) and len(enqueued) == 3


def test_user_b_never_receives_user_a_cached_answer(start_worker, user, enqueued):
    start_worker(ScriptedEngine(text="An answer."))
    answered(user, "What is the capital of France?", params=DETERMINISTIC)
    # (one question per other user: their own answers are cached for them)
    for name, question in (
        ("bob", "What is the capital of France?"),
        ("carol", "What's the capital city of France?"),
    ):
        turn, result = answered(make_user(name), question, params=DETERMINISTIC)
        assert "cache" not in meta(result)
        assert turn.assistant_message.job_id == enqueued[-1]
        assert not UsageRecord.objects.get(job_id=enqueued[-1]).cache_hit
    assert len(enqueued) == 3
    # ... while alice still gets hers
    _, mine = answered(user, "What is the capital of France?", params=DETERMINISTIC)
    assert meta(mine)["cache"] == "exact" and len(enqueued) == 3


def test_another_system_prompt_or_model_is_a_miss(start_worker, user, settings):
    default = factories.pool("default", model="default-model")
    big = factories.pool("big", model="big-model", max_context=8192)
    factories.subscribe(user, factories.plan("pro", pools=[default, big]))
    start_worker(ScriptedEngine(text="Paris."))
    answered(user, "What is the capital of France?", params=DETERMINISTIC)
    fake_heartbeat("big")  # admitted on `big`, where no worker takes the job

    def served_from_cache(content: str, **options: Any) -> bool:
        turn = chat.turn_start(
            user=user, content=content, params=DETERMINISTIC, **options
        )
        events = inference_client.generation_events(
            job_id=turn.assistant_message.job_id
        )
        # a hit's stream is complete at commit; a miss has no (or a worker's) meta
        return bool(events) and events[0].data.get("cache") is not None

    assert served_from_cache("What's the capital city of France?")  # control
    assert not served_from_cache("What is the capital of France?", model="big")
    assert not served_from_cache("What's the capital city of France?", model="big")
    assert redis_sync().xlen(keys.queue_key("big")) == 2
    settings.CHAT_SYSTEM_PROMPT = "You are a pirate. Answer like one."
    assert not served_from_cache("What is the capital of France?")
    assert not served_from_cache("What's the capital city of France?")


def test_errors_and_cancelled_answers_are_never_cached(start_worker, user, enqueued):
    worker = start_worker(ScriptedEngine(text="one two three four", fail_after=2))
    _, failed = answered(user, "Will this fail?", params=DETERMINISTIC)
    assert failed.last("error") is not None
    worker.stop()
    start_worker(ScriptedEngine(text="word ", cycle=True, delay_ms=20))
    turn = chat.turn_start(
        user=user, content="Write forever", params={"temperature": 0, "max_tokens": 500}
    )

    def stop_after_tokens(result: SseResult) -> bool:
        if sum(e.event == "token" for e in result.events) >= 3:
            inference_client.job_cancel(job_id=turn.assistant_message.job_id)
        return False

    cancelled = stream(user, turn, stop_when=stop_after_tokens)
    assert cancelled.last("done").data["status"] == "cancelled"
    assert not SemanticCacheEntry.objects.exists()
    assert not redis_sync().keys(keys.CACHE_EXACT_KEY_PATTERN)
    # material dropped at settle
    assert not redis_sync().keys(keys.CACHE_PENDING_KEY_PATTERN)
    jobs = len(enqueued)
    for content, params in (
        ("Will this fail?", DETERMINISTIC),
        ("Write forever", {"temperature": 0, "max_tokens": 500}),
    ):
        turn = chat.turn_start(user=user, content=content, params=params)
        assert turn.assistant_message.job_id == enqueued[-1]  # a miss: a new job
        inference_client.job_cancel(job_id=turn.assistant_message.job_id)
    assert len(enqueued) == jobs + 2


@pytest.mark.parametrize(
    "status,finish_reason",
    [
        ("error", "error"),
        ("cancelled", "cancelled"),
        ("filtered", "content_filter"),
        ("complete", "cancelled"),
    ],
)
def test_cache_settle_stores_only_complete_answers(user, status, finish_reason):
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hello there"},
    ]
    material = cache.cache_prepare(
        user_id=user.pk,
        messages=messages,
        params=DETERMINISTIC,
        policy=cache.CachePolicy(single_turn=True, personal=False),
    )
    assert material is not None and material.semantic
    cache.cache_pending_store(job_id="j1", material=material, pool="default", model="m")
    stored = cache.cache_settle(
        job_id="j1",
        pool="default",
        status=status,
        finish_reason=finish_reason,
        answer="partial answer",
        answer_model="m",
    )
    assert not stored
    assert cache.cache_lookup(material=material, pool="default", model="m") is None
    assert not SemanticCacheEntry.objects.exists()
    # the same answer complete is stored in both caches
    cache.cache_pending_store(job_id="j2", material=material, pool="default", model="m")
    assert cache.cache_settle(
        job_id="j2",
        pool="default",
        status="complete",
        finish_reason="stop",
        answer="Hi!",
        answer_model="m",
    )
    hit = cache.cache_lookup(material=material, pool="default", model="m")
    assert hit is not None and hit.kind == "exact" and hit.text == "Hi!"
    assert SemanticCacheEntry.objects.get().answer == "Hi!"


def test_personal_context_or_earlier_turns_keep_a_prompt_out_of_the_semantic_cache(
    user,
):
    messages = [{"role": "user", "content": "What is my name?"}]
    for policy in (
        cache.CachePolicy(single_turn=True, personal=True),
        cache.CachePolicy(single_turn=False, personal=False),
    ):
        material = cache.cache_prepare(
            user_id=user.pk, messages=messages, params=DETERMINISTIC, policy=policy
        )
        assert material is not None and not material.semantic
    two_turns = [
        {"role": "user", "content": "I am Ada."},
        {"role": "assistant", "content": "Hi Ada."},
        *messages,
    ]
    material = cache.cache_prepare(
        user_id=user.pk,
        messages=two_turns,
        params=DETERMINISTIC,
        policy=cache.CachePolicy(single_turn=True, personal=False),
    )
    assert material is not None and not material.semantic


def test_regenerate_bypasses_the_cache_and_its_answer_replaces_the_cached_one(
    start_worker, user, enqueued
):
    old = start_worker(ScriptedEngine(text="Old answer."))
    first, _ = answered(user, "Name a colour", params=DETERMINISTIC)
    _, hit = answered(user, "Name a colour", params=DETERMINISTIC)
    assert meta(hit)["cache"] == "exact" and len(enqueued) == 1
    old.stop()
    start_worker(ScriptedEngine(text="New answer."))
    again = chat.turn_regenerate(
        user=user, conversation_id=first.conversation.id, params=DETERMINISTIC
    )
    regenerated = stream(user, again)
    assert "cache" not in meta(regenerated) and regenerated.text == "New answer."
    assert again.assistant_message.job_id == enqueued[-1] and len(enqueued) == 2
    _, later = answered(user, "Name a colour", params=DETERMINISTIC)
    assert meta(later)["cache"] == "exact" and later.text == "New answer."
    assert len(enqueued) == 2
    # the semantic entry of that prompt was replaced too (one row per prompt)
    assert SemanticCacheEntry.objects.get().answer == "New answer."


def test_answer_chunks_rejoin_exactly_within_the_size():
    text = "Hello wörld 🌍, a verylongwordthatexceedsthechunksize and  spaces \n end "
    pieces = cache.answer_chunks(text, size=8)
    assert "".join(pieces) == text
    assert all(0 < len(p) <= 8 for p in pieces)
    assert cache.answer_chunks("", size=8) == []


def test_a_cached_answer_is_written_with_valid_events(user):
    hit = cache.CacheHit(
        kind="semantic", text="x " * 40, model="m", finish_reason="length"
    )
    cache.cache_serve(job_id="job-c", hit=hit, enqueued_at=time.time())
    events = inference_client.generation_events(job_id="job-c")
    for event in events:
        protocol.event_validate(event.type, event.data)
    assert [e.type for e in events][0] == "meta" and events[-1].type == "done"
    assert "".join(e.data["t"] for e in events if e.type == "token") == hit.text
    assert events[-1].data["finish_reason"] == "length"
    assert redis_sync().exists(keys.final_key("job-c"))


def test_old_semantic_entries_are_not_served_and_are_pruned(user, settings):
    settings.GATEWAY_SEMANTIC_CACHE_TTL_S = 60
    messages = [{"role": "user", "content": "What is a prime number?"}]
    material = cache.cache_prepare(
        user_id=user.pk,
        messages=messages,
        params=DETERMINISTIC,
        policy=cache.CachePolicy(single_turn=True, personal=False),
    )
    cache.cache_pending_store(job_id="j", material=material, pool="p", model="m")
    cache.cache_settle(
        job_id="j", pool="p", status="complete", finish_reason="stop", answer="A."
    )
    redis_sync().delete(*redis_sync().keys(keys.CACHE_EXACT_KEY_PATTERN))
    assert cache.cache_lookup(material=material, pool="p", model="m").kind == "semantic"
    SemanticCacheEntry.objects.update(created_at=timezone.now() - timedelta(seconds=61))
    assert cache.cache_lookup(material=material, pool="p", model="m") is None
    assert cache.semantic_cache_prune() == 1
    assert not SemanticCacheEntry.objects.exists()
