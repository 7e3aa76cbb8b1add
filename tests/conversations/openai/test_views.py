"""The API views end to end, in-process through the real ASGI app
(conversations/openai/views.py): completions streamed and not, the models list, the
API handler."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async
from csp.utils import build_policy

from conversations.models import Conversation, Message
from gateway.models import UsageRecord
from inference.engines.scripted import DEFAULT_TEXT, ScriptedEngine
from tests.conversations.openai.helpers import asgi, ask, no_reservations
from tests.gateway import factories

pytestmark = pytest.mark.django_db(transaction=True)


async def test_a_completion_returns_the_answer_with_usage_and_records_it_once(
    user, api_key, start_worker
):
    start_worker(ScriptedEngine())
    result = await asgi("POST", "/v1/chat/completions", body=ask(), key=api_key)
    assert result.status == 200, result.body
    data = result.json()
    assert data["object"] == "chat.completion"
    assert data["choices"][0]["message"] == {
        "role": "assistant",
        "content": DEFAULT_TEXT,
        "refusal": None,
    }
    assert data["choices"][0]["finish_reason"] == "stop"
    usage = data["usage"]
    assert usage["completion_tokens"] == len(DEFAULT_TEXT.split())
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    records = await sync_to_async(list)(UsageRecord.objects.filter(user=user))
    assert len(records) == 1
    record = records[0]
    assert record.status == UsageRecord.Status.COMPLETE
    assert (record.prompt_tokens, record.completion_tokens) == (
        usage["prompt_tokens"],
        usage["completion_tokens"],
    )
    assert record.pool == "default" and record.model == "scripted-1"
    assert data["id"] == "chatcmpl-" + record.job_id.replace("-", "")
    # not stored as a conversation; the reservation was settled
    assert await Conversation.objects.acount() == 0
    assert await Message.objects.acount() == 0
    assert no_reservations()


async def test_max_tokens_cuts_the_answer_with_finish_reason_length(
    api_key, start_worker
):
    start_worker(ScriptedEngine())
    result = await asgi(
        "POST", "/v1/chat/completions", body=ask(max_completion_tokens=3), key=api_key
    )
    data = result.json()
    assert data["choices"][0]["finish_reason"] == "length"
    assert data["usage"]["completion_tokens"] == 3


async def test_a_stream_sends_role_deltas_finish_usage_and_done(
    user, api_key, start_worker
):
    start_worker(ScriptedEngine())
    result = await asgi(
        "POST",
        "/v1/chat/completions",
        body=ask(stream=True, stream_options={"include_usage": True}),
        key=api_key,
    )
    assert result.status == 200
    assert result.headers["content-type"].startswith("text/event-stream")
    assert result.data_lines[-1] == "[DONE]"
    chunks = result.chunks
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert len({c["id"] for c in chunks}) == 1
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks[:-1])
    assert text == DEFAULT_TEXT
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"]["completion_tokens"] == len(DEFAULT_TEXT.split())
    assert all(c["usage"] is None for c in chunks[:-1])
    record = await UsageRecord.objects.aget(user=user)
    assert record.completion_tokens == chunks[-1]["usage"]["completion_tokens"]


async def test_a_stream_without_include_usage_has_no_usage_chunk(api_key, start_worker):
    start_worker(ScriptedEngine())
    result = await asgi(
        "POST", "/v1/chat/completions", body=ask(stream=True), key=api_key
    )
    chunks = result.chunks
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    assert all("usage" not in c for c in chunks)


def _request_limits(result) -> tuple[str, str, str] | None:
    """The ``x-ratelimit-*-requests`` headers of a response (None: absent)."""
    names = ("limit", "remaining", "reset")
    if f"x-ratelimit-{names[0]}-requests" not in result.headers:
        return None
    return tuple(result.headers[f"x-ratelimit-{n}-requests"] for n in names)


@pytest.mark.usefixtures("one_minute")
async def test_every_counted_api_response_carries_the_request_rate_headers(
    user, api_key, start_worker
):
    """OpenAI sends ``x-ratelimit-*-requests`` on every response, not only on the
    429: the window with less room left (here the key's 20 beside the user's 50)."""
    limited = await sync_to_async(factories.plan)(
        "limited", requests_per_minute=50, key_requests_per_minute=20
    )
    await sync_to_async(factories.subscribe)(user, limited)
    start_worker(ScriptedEngine())
    results = [
        await asgi("POST", "/v1/chat/completions", body=ask(), key=api_key),
        await asgi("POST", "/v1/chat/completions", body=ask(stream=True), key=api_key),
        await asgi("GET", "/v1/models", key=api_key),
        # refused after it was counted: the count is still reported
        await asgi(
            "POST", "/v1/chat/completions", body=ask(temperature=3), key=api_key
        ),
    ]
    assert [r.status for r in results] == [200, 200, 200, 400]
    assert results[1].chunks[-1]["choices"][0]["finish_reason"] == "stop"
    # 40 s to the end of the minute
    assert [_request_limits(r) for r in results] == [
        ("20", "19", "40s"),
        ("20", "18", "40s"),
        ("20", "17", "40s"),
        ("20", "16", "40s"),
    ]
    # not counted (no key): no count to report
    anonymous = await asgi("GET", "/v1/models", key="sk-not-a-key")
    assert anonymous.status == 401 and _request_limits(anonymous) is None
    # a plan without request limits sends none
    unlimited = await sync_to_async(factories.plan)(
        "unlimited", requests_per_minute=None, key_requests_per_minute=None
    )
    await sync_to_async(factories.subscribe)(user, unlimited)
    free = await asgi("GET", "/v1/models", key=api_key)
    assert free.status == 200 and _request_limits(free) is None


@pytest.mark.usefixtures("one_minute")
async def test_a_request_over_its_limit_gets_the_429_whatever_else_is_wrong(
    user, api_key, start_worker
):
    """The request is counted by the token reservation's script; a request refused
    before it (a bad parameter, a suspension) is counted then, and the limit's 429
    still comes first."""
    limited = await sync_to_async(factories.plan)(
        "limited", requests_per_minute=None, key_requests_per_minute=2
    )
    await sync_to_async(factories.subscribe)(user, limited)
    start_worker(ScriptedEngine())
    ok = await asgi("POST", "/v1/chat/completions", body=ask(), key=api_key)
    bad = await asgi(
        "POST", "/v1/chat/completions", body=ask(temperature=3), key=api_key
    )
    assert (ok.status, bad.status) == (200, 400)
    assert _request_limits(bad) == ("2", "0", "40s")  # the bad one was counted
    for body in (ask(), ask(temperature=3)):
        over = await asgi("POST", "/v1/chat/completions", body=body, key=api_key)
        assert over.status == 429, over.json()
        assert over.json()["error"]["code"] == "rate_limit_requests"
    assert await sync_to_async(no_reservations)()


async def test_models_lists_the_enabled_pools_the_plan_allows(user, api_key):
    other = await sync_to_async(factories.pool)("big", model="big-model")
    await sync_to_async(factories.pool)("off", enabled=False)
    plan = await sync_to_async(factories.plan)(pools=[other])
    await sync_to_async(factories.subscribe)(user, plan)
    result = await asgi("GET", "/v1/models", key=api_key)
    assert result.status == 200
    data = result.json()
    assert data["object"] == "list"
    assert [(m["id"], m["object"], m["root"]) for m in data["data"]] == [
        ("big", "model", "big-model")
    ]


async def test_the_api_handler_checks_the_host_and_sends_nosniff_and_the_csp(api_key):
    """The API runs on its own Django handler with one async middleware
    (chatsite/asgi.py); it keeps the site's Host check, nosniff header and
    Content-Security-Policy (without django-csp's sync middleware)."""
    ok = await asgi("GET", "/v1/models", key=api_key)
    assert ok.status == 200
    assert ok.headers["x-content-type-options"] == "nosniff"
    assert ok.headers["content-security-policy"] == build_policy()
    assert "img-src 'self'" in ok.headers["content-security-policy"]

    bad_host = await asgi("GET", "/v1/models", key=api_key, host="evil.example")
    assert bad_host.status == 400
