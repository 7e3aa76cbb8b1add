"""Following an API generation (conversations/openai/stream.py): cancel and settle on
disconnect, fallback, failures, the reservation, and the answer caches (gateway/cache.py)
through the API."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
from asgiref.sync import sync_to_async

from gateway import generations, services
from gateway.models import UsageRecord
from inference import client as inference_client
from inference import keys, protocol
from inference.connections import redis_sync
from inference.engines.scripted import ScriptedEngine
from tests.conversations.openai.helpers import asgi, ask, capital, no_reservations
from tests.gateway import factories

pytestmark = pytest.mark.django_db(transaction=True)


async def test_a_client_that_disconnects_cancels_the_job_and_is_billed_once(
    user, api_key, start_worker
):
    start_worker(ScriptedEngine(delay_ms=30, cycle=True))
    result = await asgi(
        "POST",
        "/v1/chat/completions",
        body=ask(stream=True, max_tokens=1000),
        key=api_key,
        disconnect_when=lambda r: r.body.count(b"data: ") >= 4,
    )
    assert result.status == 200
    record = await UsageRecord.objects.aget(user=user)
    assert record.status == UsageRecord.Status.CANCELLED
    assert 3 <= record.completion_tokens < 1000
    assert redis_sync().exists(keys.cancel_key(record.job_id))
    events = [
        e.type
        for e in await sync_to_async(inference_client.generation_events)(
            job_id=record.job_id
        )
    ]
    assert events[-1] == protocol.EVENT_DONE
    assert no_reservations()


async def test_a_client_that_leaves_during_admission_has_its_job_cancelled_and_settled(
    user, api_key, pool_heartbeat, monkeypatch
):
    """The admission step runs in a sync thread that a disconnect cannot stop: the job
    it enqueued must still be cancelled, billed once and its reservation settled
    (not left to run unbilled on a worker with its tokens reserved for 40 days)."""
    admitting = threading.Event()
    from gateway.generations import start

    submit = start.generation_submit

    def slow_submit(**kwargs: Any) -> float:
        submission = submit(**kwargs)
        admitting.set()
        time.sleep(0.5)  # still in the sync step when the client leaves
        return submission

    monkeypatch.setattr(start, "generation_submit", slow_submit)

    async def left_during_admission() -> None:
        await asyncio.to_thread(admitting.wait, 10)

    result = await asgi(
        "POST",
        "/v1/chat/completions",
        body=ask(stream=True),
        key=api_key,
        disconnect_after=left_during_admission,
    )

    assert admitting.is_set() and result.status == 0  # left before any response
    record = await UsageRecord.objects.aget(user=user)
    assert record.status == UsageRecord.Status.CANCELLED
    assert record.total_tokens == 0
    assert redis_sync().exists(keys.cancel_key(record.job_id))
    assert no_reservations()


@pytest.fixture
def two_pools(user, api_key, start_worker):
    """Pool "big" fails before its first token (or, with "partial", after two) and
    falls back to "small"; the user's plan allows both."""
    small = factories.pool("small", model="small-1")
    big = factories.pool("big", model="big-1", fallback=small)
    factories.subscribe(user, factories.plan("pro", pools=[small, big]))
    start_worker(
        ScriptedEngine(model="small-1", text="Answer from small"), pool="small"
    )

    def start_big(fail_after: int) -> None:
        start_worker(
            ScriptedEngine(model="big-1", text="one two three", fail_after=fail_after),
            pool="big",
        )

    return start_big


@pytest.mark.parametrize("stream", [False, True])
async def test_a_failure_before_the_first_token_is_answered_by_the_fallback(
    user, api_key, two_pools, stream
):
    await sync_to_async(two_pools)(0)
    result = await asgi(
        "POST",
        "/v1/chat/completions",
        body=ask(model="big", stream=stream),
        key=api_key,
    )
    assert result.status == 200
    if stream:
        text = "".join(
            c["choices"][0]["delta"].get("content", "") for c in result.chunks
        )
        model = result.chunks[-1]["model"]
    else:
        text = result.json()["choices"][0]["message"]["content"]
        model = result.json()["model"]
    assert (text, model) == ("Answer from small", "small-1")
    record = await UsageRecord.objects.aget(user=user)
    assert (record.pool, record.model, record.status) == (
        "small",
        "small-1",
        "complete",
    )


async def test_a_failure_after_tokens_ends_the_stream_with_an_error_object(
    user, api_key, two_pools
):
    await sync_to_async(two_pools)(2)
    result = await asgi(
        "POST", "/v1/chat/completions", body=ask(model="big", stream=True), key=api_key
    )
    assert result.status == 200
    assert "[DONE]" not in result.data_lines
    *chunks, last = result.chunks
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks) == (
        "one two"
    )
    assert last["error"]["type"] == "server_error" and last["error"]["message"]
    record = await UsageRecord.objects.aget(user=user)
    # billed what was generated: the prompt plus the two tokens streamed
    assert record.status == "error" and record.completion_tokens == 2
    assert record.prompt_tokens > 0
    # not streamed: a 500 in OpenAI's error shape
    result = await asgi(
        "POST", "/v1/chat/completions", body=ask(model="big"), key=api_key
    )
    assert result.status == 500
    assert result.json()["error"]["code"] == protocol.ERROR_ENGINE
    assert no_reservations()


async def test_the_reservation_counts_the_prompt_as_the_model_will(
    user, api_key, pool_heartbeat
):
    """SmolLM2's chat template adds its own system prompt to a request without one:
    "hi" is 31 prompt tokens (the character estimate says 7). A budget of 31 + 64 - 1
    cannot hold "hi" with max_tokens 64, so it must not be admitted: admitting it would
    let the request spend past the budget."""
    from inference.tokens import prompt_counter

    hi = [{"role": "user", "content": "hi"}]
    prompt = prompt_counter("llamacpp")(hi)
    assert prompt > generations.prompt_tokens_estimate(hi)
    plan = await sync_to_async(factories.plan)(monthly_token_budget=prompt + 64 - 1)
    await sync_to_async(factories.subscribe)(user, plan)

    over = await asgi(
        "POST",
        "/v1/chat/completions",
        body=ask(messages=hi, max_tokens=64),
        key=api_key,
    )
    assert over.status == 429, over.body
    fits = await asgi(
        "POST",
        "/v1/chat/completions",
        body=ask(messages=hi, max_tokens=63, stream=True),
        key=api_key,
        disconnect_when=lambda r: True,
    )
    assert fits.status == 200


async def test_a_repeated_deterministic_request_is_answered_by_the_exact_cache(
    user, api_key, start_worker, enqueued
):
    start_worker(ScriptedEngine(text="Paris is the capital."))
    first = await asgi(
        "POST", "/v1/chat/completions", body=capital(temperature=0), key=api_key
    )
    assert first.status == 200 and "x-chatsite-cache" not in first.headers

    second = await asgi(
        "POST",
        "/v1/chat/completions",
        body=capital(
            temperature=0, stream=True, stream_options={"include_usage": True}
        ),
        key=api_key,
    )

    assert second.status == 200 and second.headers["x-chatsite-cache"] == "exact"
    chunks = second.chunks
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks[:-1])
    assert text == "Paris is the capital."
    # the usage of the generation that wrote the answer, its whole prompt cached
    usage = first.json()["usage"]
    assert usage["completion_tokens"] == len("Paris is the capital.".split())
    assert chunks[-1]["usage"] == {
        **usage,
        "prompt_tokens_details": {"cached_tokens": usage["prompt_tokens"]},
    }
    third = await asgi(
        "POST", "/v1/chat/completions", body=capital(temperature=0), key=api_key
    )
    assert third.headers["x-chatsite-cache"] == "exact"
    assert third.json()["usage"] == chunks[-1]["usage"]
    assert len(enqueued) == 1  # the later requests never reached a worker
    records = await sync_to_async(list)(UsageRecord.objects.order_by("created_at"))
    assert [r.cache_hit for r in records] == [False, True, True]
    # billed as the plans say: a hit processed no token, so it costs nothing
    assert records[1].total_tokens == records[2].total_tokens == 0
    assert records[1].cost == 0
    assert no_reservations()


async def test_a_sampled_request_is_not_cached_unless_it_opts_in(
    api_key, start_worker, enqueued
):
    start_worker(ScriptedEngine(text="Paris."))
    for _ in range(2):
        result = await asgi(
            "POST", "/v1/chat/completions", body=capital(temperature=0.8), key=api_key
        )
        assert result.status == 200 and "x-chatsite-cache" not in result.headers
    assert len(enqueued) == 2

    await asgi(
        "POST",
        "/v1/chat/completions",
        body=capital(temperature=0.8, cache=True),
        key=api_key,
    )
    hit = await asgi(
        "POST",
        "/v1/chat/completions",
        body=capital(temperature=0.8, cache=True),
        key=api_key,
    )
    assert hit.headers["x-chatsite-cache"] == "exact"
    assert hit.json()["choices"][0]["message"]["content"] == "Paris."
    assert len(enqueued) == 3


async def test_cache_false_opts_a_deterministic_request_out_of_the_caches(
    api_key, start_worker, enqueued
):
    start_worker(ScriptedEngine(text="Paris."))
    for _ in range(2):
        result = await asgi(
            "POST",
            "/v1/chat/completions",
            body=capital(temperature=0, cache=False),
            key=api_key,
        )
        assert result.status == 200 and "x-chatsite-cache" not in result.headers
    assert len(enqueued) == 2
    # nothing was stored either: the next deterministic request is a miss
    third = await asgi(
        "POST", "/v1/chat/completions", body=capital(temperature=0), key=api_key
    )
    assert "x-chatsite-cache" not in third.headers and len(enqueued) == 3


async def test_another_users_key_never_gets_the_cached_answer(
    user, other_user, api_key, start_worker, enqueued
):
    start_worker(ScriptedEngine(text="Paris."))
    await asgi("POST", "/v1/chat/completions", body=capital(temperature=0), key=api_key)
    other_key = (await sync_to_async(services.api_key_create)(user=other_user))[1]

    result = await asgi(
        "POST", "/v1/chat/completions", body=capital(temperature=0), key=other_key
    )

    assert result.status == 200 and "x-chatsite-cache" not in result.headers
    assert len(enqueued) == 2


async def test_a_paraphrase_is_answered_by_the_semantic_cache_only_on_opt_in(
    api_key, start_worker, enqueued, settings, embedding_worker
):
    settings.GATEWAY_SEMANTIC_CACHE_MIN_SIMILARITY = 0.9
    start_worker(ScriptedEngine(text="Paris."))
    first = await asgi(
        "POST",
        "/v1/chat/completions",
        body=capital(temperature=0, cache=True),
        key=api_key,
    )

    def paraphrase(text: str, **extra: Any) -> dict[str, Any]:
        return ask(messages=[{"role": "user", "content": text}], **extra)

    exact_only = await asgi(
        "POST",
        "/v1/chat/completions",
        body=paraphrase("What's the capital city of France?", temperature=0),
        key=api_key,
    )
    opted_in = await asgi(
        "POST",
        "/v1/chat/completions",
        body=paraphrase("What's the capital of France?", temperature=0, cache=True),
        key=api_key,
    )

    assert "x-chatsite-cache" not in exact_only.headers  # temperature 0: exact only
    assert opted_in.headers["x-chatsite-cache"] == "semantic"
    assert opted_in.json()["choices"][0]["message"]["content"] == "Paris."
    # the usage of the generation that wrote the answer, its whole prompt cached
    usage = first.json()["usage"]
    assert usage["prompt_tokens"] > 0 and usage["completion_tokens"] == 1
    cached = {
        **usage,
        "prompt_tokens_details": {"cached_tokens": usage["prompt_tokens"]},
    }
    assert opted_in.json()["usage"] == cached
    streamed = await asgi(
        "POST",
        "/v1/chat/completions",
        body=paraphrase(
            "What's the capital of France?",
            temperature=0,
            cache=True,
            stream=True,
            stream_options={"include_usage": True},
        ),
        key=api_key,
    )
    assert streamed.headers["x-chatsite-cache"] == "semantic"
    assert streamed.chunks[-1]["usage"] == cached
    assert len(enqueued) == 2
    # billed as the plans say: a hit processed no token, so it costs nothing
    records = await sync_to_async(list)(UsageRecord.objects.order_by("created_at"))
    assert [r.cache_hit for r in records] == [False, False, True, True]
    assert records[2].total_tokens == records[3].total_tokens == 0
    assert records[2].cost == records[3].cost == 0
