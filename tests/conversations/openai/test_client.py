"""End to end with the official `openai` client: against the web process (uvicorn) and a
worker process,
and in-process where the test sets the quota clock."""

from __future__ import annotations

import time
from typing import Any

import httpx
import openai
import pytest
from asgiref.sync import sync_to_async

from conversations.openai.stream import prompt_tokens_count
from gateway import quota
from gateway.models import UsageRecord
from inference.engines.scripted import DEFAULT_TEXT, ScriptedEngine
from tests.gateway import factories
from tests.stack import running_stack

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def stack(api_key):
    with running_stack(
        ["--pool", "default", "--engine", "scripted", "--delay-ms", "2"]
    ) as base:
        yield base


@pytest.mark.slow
def test_the_openai_client_streams_and_not_with_usage(user, api_key, stack):
    client = openai.OpenAI(base_url=stack + "/v1", api_key=api_key, max_retries=0)
    # (the seeded embedding pool may be listed too, as kind "embedding")
    assert [m.id for m in client.models.list() if m.kind == "chat"] == ["default"]
    completion = client.chat.completions.create(
        model="default", messages=[{"role": "user", "content": "Hello?"}]
    )
    assert completion.choices[0].message.content == DEFAULT_TEXT
    assert completion.choices[0].finish_reason == "stop"
    assert completion.usage.completion_tokens == len(DEFAULT_TEXT.split())
    stream = client.chat.completions.create(
        model="default",
        messages=[{"role": "user", "content": "Hello again?"}],
        stream=True,
        stream_options={"include_usage": True},
        max_tokens=5,
        temperature=0,
        top_p=0.5,
        stop=["zzz"],
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == " ".join(DEFAULT_TEXT.split()[:5])
    assert chunks[-2].choices[0].finish_reason == "length"
    assert chunks[-1].usage.completion_tokens == 5
    records = UsageRecord.objects.filter(user=user).order_by("created_at")
    assert [r.status for r in records] == ["complete", "complete"]
    assert records[1].completion_tokens == 5


async def test_the_openai_client_retries_a_429_and_then_succeeds(
    user, api_key, start_worker, monkeypatch
):
    """The quota windows are read on a clock this test sets (``gateway.quota`` takes
    ``now=``), 2.5 s before a minute ends: the request gets a 429 whose Retry-After is
    the ~3 s left, and the client's retry lands in the next minute, where it fits (the
    client honours Retry-After up to 60 s). In-process, so that the server reads the
    same clock: the official async client over httpx's ASGI transport."""
    from chatsite.asgi import application

    start_worker(ScriptedEngine())
    plan = await sync_to_async(factories.plan)(
        tokens_per_minute=400, tokens_per_day=10_000
    )
    await sync_to_async(factories.subscribe)(user, plan)
    limits = quota.Limits(per_minute=400, per_day=10_000)
    # load the tokenizer the admission counts with now: it must not eat the 2.5 s
    await sync_to_async(prompt_tokens_count)([{"role": "user", "content": "Hi"}])
    now = time.time()
    offset = (now // 60 + 2) * 60 - 2.5 - now

    def clock() -> float:
        return time.time() + offset

    reserve = quota.quota_reserve
    monkeypatch.setattr(
        quota, "quota_reserve", lambda **kwargs: reserve(now=clock(), **kwargs)
    )
    reserve(user_id=user.pk, job_id="hold", tokens=390, limits=limits, now=clock())
    seen: list[tuple[int, str]] = []

    async def on_response(response: httpx.Response) -> None:
        seen.append((response.status_code, response.headers.get("retry-after", "")))

    def http_client(**options: Any) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            transport=httpx.ASGITransport(app=application), **options
        )

    client = openai.AsyncOpenAI(
        base_url="http://testserver/v1",
        api_key=api_key,
        max_retries=2,
        http_client=http_client(event_hooks={"response": [on_response]}),
    )
    completion = await client.chat.completions.create(
        model="default", messages=[{"role": "user", "content": "Hi"}], max_tokens=100
    )
    assert [status for status, _ in seen] == [429, 200]
    assert 1 <= int(seen[0][1]) <= 4
    assert completion.choices[0].message.content == DEFAULT_TEXT
    assert await UsageRecord.objects.filter(user=user).acount() == 1
    # with no retries left the client raises RateLimitError with our message
    reserve(user_id=user.pk, job_id="hold2", tokens=300, limits=limits, now=clock())
    strict = openai.AsyncOpenAI(
        base_url="http://testserver/v1",
        api_key=api_key,
        max_retries=0,
        http_client=http_client(),
    )
    with pytest.raises(openai.RateLimitError) as caught:
        await strict.chat.completions.create(
            model="default",
            messages=[{"role": "user", "content": "Hi"}],
            max_tokens=100,
        )
    assert caught.value.code == "quota_minute"
    assert "per-minute token limit" in caught.value.message


@pytest.mark.slow
def test_the_openai_client_does_not_retry_a_daily_limit(user, api_key, stack):
    factories.subscribe(user, factories.plan(tokens_per_day=400))
    quota.quota_reserve(
        user_id=user.pk, job_id="hold", tokens=390, limits=quota.Limits(per_day=400)
    )
    seen: list[int] = []
    http = httpx.Client(
        event_hooks={"response": [lambda r: seen.append(r.status_code)]}
    )
    client = openai.OpenAI(
        base_url=stack + "/v1", api_key=api_key, max_retries=2, http_client=http
    )
    with pytest.raises(openai.RateLimitError) as caught:
        client.chat.completions.create(
            model="default",
            messages=[{"role": "user", "content": "Hi"}],
            max_tokens=100,
        )
    # Retry-After is hours away (past the client's 60 s): one request, no retry
    assert seen == [429]
    assert caught.value.code == "quota_day"
    assert "daily token limit" in caught.value.message


@pytest.mark.slow
def test_the_openai_client_raises_authentication_error_for_a_bad_key(api_key, stack):
    client = openai.OpenAI(base_url=stack + "/v1", api_key="sk-wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as caught:
        client.chat.completions.create(
            model="default", messages=[{"role": "user", "content": "Hi"}]
        )
    assert caught.value.code == "invalid_api_key"
    with pytest.raises(openai.NotFoundError):
        openai.OpenAI(
            base_url=stack + "/v1", api_key=api_key, max_retries=0
        ).chat.completions.create(
            model="nope", messages=[{"role": "user", "content": "Hi"}]
        )
