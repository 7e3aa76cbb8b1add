"""The OpenAI-compatible API (conversations/api.py): in-process through the real ASGI
app (validation, errors, quota, disconnect), and end to end with the official `openai`
client against daphne and a worker process."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any

import httpx
import openai
import pytest
from asgiref.sync import sync_to_async
from django.db import connection

from conversations.models import Conversation, Message
from gateway import generations, keys, quota, services
from gateway.models import ApiKey, UsageRecord
from inference import client as inference_client
from inference import protocol
from inference.connections import redis_sync
from inference.engines.scripted import DEFAULT_TEXT, ScriptedEngine
from tests.gateway import factories
from tests.stack import running_stack

pytestmark = pytest.mark.django_db(transaction=True)


class Result:
    """What one ASGI request produced."""

    def __init__(self) -> None:
        self.status = 0
        self.headers: dict[str, str] = {}
        self.body = b""

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def data_lines(self) -> list[str]:
        """The ``data:`` payloads of an SSE body, in order."""
        return [
            line[len("data: ") :]
            for line in self.body.decode().split("\n")
            if line.startswith("data: ")
        ]

    @property
    def chunks(self) -> list[dict[str, Any]]:
        return [json.loads(d) for d in self.data_lines if d != "[DONE]"]


async def asgi(
    method: str,
    path: str,
    *,
    body: Any = None,
    key: str | None = None,
    disconnect_when: Any = None,
    disconnect_after: Any = None,
    timeout: float = 30.0,
    host: str = "testserver",
) -> Result:
    """Send one request through ``chatsite.asgi.application``; collect the response.

    ``disconnect_when(result)`` true: the client disconnects (``http.disconnect``);
    with ``disconnect_after`` (a coroutine function) it disconnects once that returns,
    whatever was sent.
    """
    from chatsite.asgi import application

    raw = json.dumps(body).encode() if body is not None else b""
    headers = [(b"host", host.encode()), (b"content-type", b"application/json")]
    if key is not None:
        headers.append((b"authorization", f"Bearer {key}".encode()))
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 50000),
        "server": ("testserver", 80),
    }
    result = Result()
    gone = asyncio.Event()
    sent = False

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": raw, "more_body": False}
        if disconnect_after is not None:
            await disconnect_after()
        else:
            await gone.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            result.status = message["status"]
            result.headers = {
                k.decode().lower(): v.decode() for k, v in message["headers"]
            }
        elif message["type"] == "http.response.body":
            result.body += message.get("body", b"")
            if disconnect_when and not gone.is_set() and disconnect_when(result):
                gone.set()

    await asyncio.wait_for(application(scope, receive, send), timeout=timeout)
    return result


@pytest.fixture
def api_key(user) -> str:
    factories.pool("default", model="scripted-1")
    return services.api_key_create(user=user, name="tests")[1]


def _ask(**extra: Any) -> dict[str, Any]:
    return {
        "model": "default",
        "messages": [{"role": "user", "content": "Say something."}],
        **extra,
    }


def _no_reservations() -> bool:
    return not list(redis_sync().scan_iter(keys.RESERVATION_KEY_PATTERN))


async def test_a_completion_returns_the_answer_with_usage_and_records_it_once(
    user, api_key, start_worker
):
    start_worker(ScriptedEngine())
    result = await asgi("POST", "/v1/chat/completions", body=_ask(), key=api_key)
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
    assert _no_reservations()


async def test_max_tokens_cuts_the_answer_with_finish_reason_length(
    api_key, start_worker
):
    start_worker(ScriptedEngine())
    result = await asgi(
        "POST", "/v1/chat/completions", body=_ask(max_completion_tokens=3), key=api_key
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
        body=_ask(stream=True, stream_options={"include_usage": True}),
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
        "POST", "/v1/chat/completions", body=_ask(stream=True), key=api_key
    )
    chunks = result.chunks
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    assert all("usage" not in c for c in chunks)


async def test_a_client_that_disconnects_cancels_the_job_and_is_billed_once(
    user, api_key, start_worker
):
    start_worker(ScriptedEngine(delay_ms=30, cycle=True))
    result = await asgi(
        "POST",
        "/v1/chat/completions",
        body=_ask(stream=True, max_tokens=1000),
        key=api_key,
        disconnect_when=lambda r: r.body.count(b"data: ") >= 4,
    )
    assert result.status == 200
    record = await UsageRecord.objects.aget(user=user)
    assert record.status == UsageRecord.Status.CANCELLED
    assert 3 <= record.completion_tokens < 1000
    assert redis_sync().exists(protocol.cancel_key(record.job_id))
    events = [
        e.type
        for e in await sync_to_async(inference_client.generation_events)(
            job_id=record.job_id
        )
    ]
    assert events[-1] == protocol.EVENT_DONE
    assert _no_reservations()


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
        body=_ask(stream=True),
        key=api_key,
        disconnect_after=left_during_admission,
    )

    assert admitting.is_set() and result.status == 0  # left before any response
    record = await UsageRecord.objects.aget(user=user)
    assert record.status == UsageRecord.Status.CANCELLED
    assert record.total_tokens == 0
    assert redis_sync().exists(protocol.cancel_key(record.job_id))
    assert _no_reservations()


def _terminate_idle_pooled_connections() -> int:
    """Close the pool's idle connections server-side (as a PostgreSQL restart, a
    failover or an idle timeout would); return how many. (Reads the pool's private
    deque of idle connections: psycopg_pool has no public accessor.)"""
    connection.ensure_connection()  # taken from the pool first: not an idle one
    pids = [pooled.info.backend_pid for pooled in list(connection.pool._pool)]
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM unnest(%s::int[]) AS pid",
            [pids],
        )
        return cursor.fetchone()[0]


async def test_dead_pooled_connections_fail_at_most_one_request_quickly(api_key):
    """After a PostgreSQL restart or failover the pool holds dead connections. The
    first request that meets one fails fast with a 503 (retryable), the pool replaces
    the others at once (chatsite/db.py), and the next requests succeed."""
    warm = await asyncio.gather(
        *[asgi("GET", "/v1/models", key=api_key) for _ in "1234"]
    )
    assert [r.status for r in warm] == [200] * 4  # the pool holds a few connections
    assert await sync_to_async(_terminate_idle_pooled_connections)() >= 1

    outcomes = []
    for _ in range(4):
        started = time.monotonic()
        result = await asgi("GET", "/v1/models", key=api_key)
        outcomes.append((result.status, time.monotonic() - started < 1.0))
        if result.status == 503:
            assert result.json()["error"]["code"] == "database_unavailable"
            assert result.headers["retry-after"] == "1"

    assert all(fast for _status, fast in outcomes)
    assert [status for status, _fast in outcomes].count(503) <= 1
    assert outcomes[-1][0] == 200 and outcomes[-2][0] == 200


@pytest.mark.parametrize("case", ["missing", "unknown", "revoked", "malformed"])
async def test_a_missing_unknown_or_revoked_key_is_a_401_in_openai_shape(
    user, api_key, case
):
    key = {"missing": None, "unknown": "sk-not-a-real-key", "malformed": "x y"}.get(
        case, api_key
    )
    if case == "revoked":
        stored = await ApiKey.objects.aget(user=user)
        await sync_to_async(services.api_key_revoke)(key_id=stored.pk)
    for method, path in (("POST", "/v1/chat/completions"), ("GET", "/v1/models")):
        result = await asgi(method, path, body=_ask(), key=key)
        assert result.status == 401
        error = result.json()["error"]
        assert error["code"] == "invalid_api_key"
        assert error["type"] == "invalid_request_error" and error["message"]


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"model": "default"}, "invalid_messages"),
        ({"messages": [{"role": "user", "content": "hi"}]}, "missing_model"),
        (_ask(messages=[{"role": "tool", "content": "x"}]), "invalid_role"),
        (_ask(messages=[{"role": "user", "content": 3}]), "invalid_content"),
        (_ask(messages=[{"role": "system", "content": "only"}]), "no_prompt"),
        (_ask(temperature=3), "invalid_parameter"),
        (_ask(max_tokens=0), "invalid_parameter"),
        (_ask(stop=["a", "b", "c", "d", "e"]), "invalid_parameter"),
        (_ask(stream_options={"include_usage": True}), "invalid_parameter"),
        (_ask(n=2), "invalid_parameter"),
        (
            _ask(stream=True, stream_options={"include_usage": "false"}),
            "invalid_parameter",
        ),
    ],
)
async def test_invalid_requests_are_400s_naming_the_problem(user, api_key, body, code):
    result = await asgi("POST", "/v1/chat/completions", body=body, key=api_key)
    assert result.status == 400, result.body
    error = result.json()["error"]
    assert (error["code"], error["type"]) == (code, "invalid_request_error")
    assert await UsageRecord.objects.acount() == 0 and _no_reservations()


@pytest.mark.parametrize(
    "body",
    [
        _ask(messages=[{"role": "user", "content": "hi \ud800"}]),
        _ask(
            messages=[{"role": "user", "content": [{"type": "text", "text": "\udc00"}]}]
        ),
        _ask(
            messages=[
                {"role": "assistant", "content": "\udfff"},
                {"role": "user", "content": "hi"},
            ]
        ),
        _ask(stop="\ud800"),
        _ask(temperature=0, messages=[{"role": "user", "content": "\ud83d"}]),
    ],
    ids=["content", "text-part", "assistant", "stop", "cacheable"],
)
async def test_an_unpaired_surrogate_escape_is_a_400_not_a_500(
    user, api_key, pool_heartbeat, body
):
    """JSON may escape a lone UTF-16 surrogate (``"\\ud800"``, as json.dumps sends it
    here); Python decodes it to a str that UTF-8 cannot encode, so the job (Redis) or
    the cache key would fail on it with a 500."""
    result = await asgi("POST", "/v1/chat/completions", body=body, key=api_key)
    assert result.status == 400, result.body
    error = result.json()["error"]
    assert error["code"] == "invalid_character" and "surrogate" in error["message"]
    assert await UsageRecord.objects.acount() == 0 and _no_reservations()


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
        body=_ask(model="big", stream=stream),
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
        "POST", "/v1/chat/completions", body=_ask(model="big", stream=True), key=api_key
    )
    assert result.status == 200
    assert "[DONE]" not in result.data_lines
    *chunks, last = result.chunks
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks) == (
        "one two"
    )
    assert last["error"]["type"] == "server_error" and last["error"]["message"]
    record = await UsageRecord.objects.aget(user=user)
    assert record.status == "error" and record.total_tokens == 0
    # not streamed: a 500 in OpenAI's error shape
    result = await asgi(
        "POST", "/v1/chat/completions", body=_ask(model="big"), key=api_key
    )
    assert result.status == 500
    assert result.json()["error"]["code"] == protocol.ERROR_ENGINE
    assert _no_reservations()


async def test_text_parts_and_developer_messages_are_accepted(api_key, start_worker):
    start_worker(ScriptedEngine())
    body = _ask(
        messages=[
            {"role": "developer", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "Hi"}]},
        ]
    )
    result = await asgi("POST", "/v1/chat/completions", body=body, key=api_key)
    assert result.status == 200
    assert result.json()["choices"][0]["message"]["content"] == DEFAULT_TEXT


async def test_an_unknown_model_is_a_404_model_not_found(api_key):
    result = await asgi(
        "POST", "/v1/chat/completions", body=_ask(model="gpt-9"), key=api_key
    )
    assert result.status == 404
    assert result.json()["error"]["code"] == "model_not_found"


async def test_over_quota_is_a_429_with_headers_and_nothing_reserved(user, api_key):
    plan = await sync_to_async(factories.plan)(tokens_per_minute=60)
    await sync_to_async(factories.subscribe)(user, plan)
    result = await asgi(
        "POST", "/v1/chat/completions", body=_ask(max_tokens=500), key=api_key
    )
    assert result.status == 429
    error = result.json()["error"]
    assert (error["code"], error["type"]) == ("quota_minute", "tokens")
    assert "per-minute" in error["message"]
    assert int(result.headers["retry-after"]) >= 1
    assert result.headers["x-ratelimit-limit-tokens"] == "60"
    assert "x-ratelimit-reset-tokens" in result.headers
    # alone over the limit: retrying cannot help
    assert result.headers["x-should-retry"] == "false"
    assert _no_reservations() and await UsageRecord.objects.acount() == 0


async def test_a_pool_without_a_live_worker_is_a_503(api_key):
    result = await asgi("POST", "/v1/chat/completions", body=_ask(), key=api_key)
    assert result.status == 503
    assert result.json()["error"]["type"] == "server_error"
    assert "retry-after" in result.headers
    assert _no_reservations()


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


# --- end to end: the official openai client against daphne + a worker process ---------


@pytest.fixture
def stack(api_key):
    with running_stack(
        ["--pool", "default", "--engine", "scripted", "--delay-ms", "2"]
    ) as base:
        yield base


@pytest.mark.slow
def test_the_openai_client_streams_and_not_with_usage(user, api_key, stack):
    client = openai.OpenAI(base_url=stack + "/v1", api_key=api_key, max_retries=0)
    assert [m.id for m in client.models.list()] == ["default"]
    completion = client.chat.completions.create(
        model="default", messages=[{"role": "user", "content": "Hello?"}]
    )
    assert completion.choices[0].message.content == DEFAULT_TEXT
    assert completion.choices[0].finish_reason == "stop"
    assert completion.usage.completion_tokens == len(DEFAULT_TEXT.split())
    stream = client.chat.completions.create(
        model="scripted-1",  # the pool's model name works too
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


@pytest.mark.slow
def test_the_openai_client_retries_a_429_and_then_succeeds(user, api_key, stack):
    plan = factories.plan(tokens_per_minute=400, tokens_per_day=10_000)
    factories.subscribe(user, plan)
    limits = quota.Limits(per_minute=400, per_day=10_000)
    # Hold most of this minute's budget shortly before the minute ends: the request
    # gets a 429 whose Retry-After is the ~2 s left, and the client's retry lands in
    # the next minute, where it fits (the client honours Retry-After up to 60 s).
    left = 60 - time.time() % 60
    if left < 1.5:
        time.sleep(left + 0.1)
        left = 60 - time.time() % 60
    if left > 3:
        time.sleep(left - 2.5)
    quota.quota_reserve(user_id=user.pk, job_id="hold", tokens=390, limits=limits)
    seen: list[tuple[int, str]] = []

    def on_response(response: httpx.Response) -> None:
        seen.append((response.status_code, response.headers.get("retry-after", "")))

    http = httpx.Client(event_hooks={"response": [on_response]})
    client = openai.OpenAI(
        base_url=stack + "/v1", api_key=api_key, max_retries=2, http_client=http
    )
    completion = client.chat.completions.create(
        model="default", messages=[{"role": "user", "content": "Hi"}], max_tokens=100
    )
    assert [status for status, _ in seen] == [429, 200]
    assert 1 <= int(seen[0][1]) <= 4
    assert completion.choices[0].message.content == DEFAULT_TEXT
    assert UsageRecord.objects.filter(user=user).count() == 1
    # with no retries left the client raises RateLimitError with our message
    quota.quota_reserve(user_id=user.pk, job_id="hold2", tokens=300, limits=limits)
    strict = openai.OpenAI(base_url=stack + "/v1", api_key=api_key, max_retries=0)
    with pytest.raises(openai.RateLimitError) as caught:
        strict.chat.completions.create(
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


# --- answer caches (gateway/cache/) through the API ------------------------------------


CAPITAL = "What is the capital of France?"


def _capital(**extra: Any) -> dict[str, Any]:
    return _ask(messages=[{"role": "user", "content": CAPITAL}], **extra)


async def test_a_repeated_deterministic_request_is_answered_by_the_exact_cache(
    user, api_key, start_worker, enqueued
):
    start_worker(ScriptedEngine(text="Paris is the capital."))
    first = await asgi(
        "POST", "/v1/chat/completions", body=_capital(temperature=0), key=api_key
    )
    assert first.status == 200 and "x-chatsite-cache" not in first.headers

    second = await asgi(
        "POST",
        "/v1/chat/completions",
        body=_capital(
            temperature=0, stream=True, stream_options={"include_usage": True}
        ),
        key=api_key,
    )

    assert second.status == 200 and second.headers["x-chatsite-cache"] == "exact"
    chunks = second.chunks
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks[:-1])
    assert text == "Paris is the capital."
    assert chunks[-1]["usage"]["total_tokens"] == 0
    assert len(enqueued) == 1  # the second request never reached a worker
    records = await sync_to_async(list)(UsageRecord.objects.order_by("created_at"))
    assert [r.cache_hit for r in records] == [False, True]
    assert records[1].total_tokens == 0 and records[1].cost == 0
    assert _no_reservations()


async def test_a_sampled_request_is_not_cached_unless_it_opts_in(
    api_key, start_worker, enqueued
):
    start_worker(ScriptedEngine(text="Paris."))
    for _ in range(2):
        result = await asgi(
            "POST", "/v1/chat/completions", body=_capital(temperature=0.8), key=api_key
        )
        assert result.status == 200 and "x-chatsite-cache" not in result.headers
    assert len(enqueued) == 2

    await asgi(
        "POST",
        "/v1/chat/completions",
        body=_capital(temperature=0.8, cache=True),
        key=api_key,
    )
    hit = await asgi(
        "POST",
        "/v1/chat/completions",
        body=_capital(temperature=0.8, cache=True),
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
            body=_capital(temperature=0, cache=False),
            key=api_key,
        )
        assert result.status == 200 and "x-chatsite-cache" not in result.headers
    assert len(enqueued) == 2
    # nothing was stored either: the next deterministic request is a miss
    third = await asgi(
        "POST", "/v1/chat/completions", body=_capital(temperature=0), key=api_key
    )
    assert "x-chatsite-cache" not in third.headers and len(enqueued) == 3


async def test_another_users_key_never_gets_the_cached_answer(
    user, other_user, api_key, start_worker, enqueued
):
    start_worker(ScriptedEngine(text="Paris."))
    await asgi(
        "POST", "/v1/chat/completions", body=_capital(temperature=0), key=api_key
    )
    other_key = (await sync_to_async(services.api_key_create)(user=other_user))[1]

    result = await asgi(
        "POST", "/v1/chat/completions", body=_capital(temperature=0), key=other_key
    )

    assert result.status == 200 and "x-chatsite-cache" not in result.headers
    assert len(enqueued) == 2


async def test_a_paraphrase_is_answered_by_the_semantic_cache_only_on_opt_in(
    api_key, start_worker, enqueued, settings
):
    settings.GATEWAY_SEMANTIC_CACHE_MIN_SIMILARITY = 0.9
    start_worker(ScriptedEngine(text="Paris."))
    await asgi(
        "POST",
        "/v1/chat/completions",
        body=_capital(temperature=0, cache=True),
        key=api_key,
    )

    def paraphrase(text: str, **extra: Any) -> dict[str, Any]:
        return _ask(messages=[{"role": "user", "content": text}], **extra)

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
    assert len(enqueued) == 2


async def test_a_non_boolean_cache_flag_is_a_400(api_key):
    result = await asgi(
        "POST", "/v1/chat/completions", body=_capital(cache="yes"), key=api_key
    )
    assert result.status == 400
    assert result.json()["error"]["code"] == "invalid_parameter"


async def test_the_api_handler_checks_the_host_and_sends_nosniff(api_key):
    """The API runs on its own Django handler with one async middleware
    (chatsite/asgi.py); it keeps the site's Host check and nosniff header."""
    ok = await asgi("GET", "/v1/models", key=api_key)
    assert ok.status == 200
    assert ok.headers["x-content-type-options"] == "nosniff"

    bad_host = await asgi("GET", "/v1/models", key=api_key, host="evil.example")
    assert bad_host.status == 400


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
        body=_ask(messages=hi, max_tokens=64),
        key=api_key,
    )
    assert over.status == 429, over.body
    fits = await asgi(
        "POST",
        "/v1/chat/completions",
        body=_ask(messages=hi, max_tokens=63, stream=True),
        key=api_key,
        disconnect_when=lambda r: True,
    )
    assert fits.status == 200
