"""The one generation lifecycle (gateway/generations/): the chat and the API reach the
same outcome for the same terminal events, and a stream that breaks ends clearly."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from dataclasses import asdict, dataclass
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.conf import settings
from django.http import JsonResponse
from django.test import Client
from django.urls import reverse
from redis.exceptions import ConnectionError as RedisConnectionError

from chatsite.errors import DomainError, error_response
from conversations import services as chat
from conversations.models import Message
from conversations.openai import stream as api
from gateway import generations, quota
from gateway import services as gateway_services
from gateway.generations import policy
from gateway.models import UsageRecord
from inference import client as inference_client
from inference import keys, protocol, streams
from inference.affinity import affinity_of
from inference.connections import redis_sync
from tests.conftest import fake_heartbeat
from tests.conversations.openai.helpers import asgi, ask, no_reservations
from tests.gateway import factories
from tests.sse import asgi_sse, session_cookie

pytestmark = pytest.mark.django_db(transaction=True)

USAGE = {"prompt_tokens": 11, "completion_tokens": 3, "cached_tokens": 0}


@dataclass
class Case:
    """A terminal event and what every surface must make of it."""

    name: str
    tokens: list[str]
    terminal: tuple[str, dict[str, Any]]
    status: str  # UsageRecord.Status == Message.Status
    finish_reason: str  # stored
    openai: str | None  # OpenAI finish_reason; None: an error response
    http_status: int  # non-streamed API response
    billed: int  # tokens on the usage record


def _done(finish: str) -> tuple[str, dict[str, Any]]:
    return protocol.EVENT_DONE, {
        "finish_reason": finish,
        "usage": USAGE,
        "ttft_ms": 12,
        "latency_ms": 40,
    }


def _error(code: str, usage: dict[str, int] | None = None) -> tuple[str, dict]:
    return protocol.EVENT_ERROR, {
        "code": code,
        "message": f"failed: {code}",
        "usage": usage,
    }


# what a worker reports when its engine fails (or its job is reclaimed) after 2 tokens
SPENT = {"prompt_tokens": 11, "completion_tokens": 2, "cached_tokens": 0}


CASES = [
    Case("stop", ["Hel", "lo"], _done("stop"), "complete", "stop", "stop", 200, 14),
    Case(
        "length",
        ["Hel", "lo"],
        _done("length"),
        "complete",
        "length",
        "length",
        200,
        14,
    ),
    Case(
        "cancelled",
        ["Hel"],
        _done("cancelled"),
        "cancelled",
        "cancelled",
        "stop",
        200,
        14,
    ),
    Case(
        "content_filter",
        ["Hel"],
        _done("content_filter"),
        "filtered",
        "content_filter",
        "content_filter",
        200,
        14,
    ),
    # an error after tokens bills the reported prompt + one token per token event
    Case(
        "engine_error_midway",
        ["Hel", "lo"],
        _error("engine_error", SPENT),
        "error",
        "error",
        None,
        500,
        13,
    ),
    Case(
        "worker_lost_midway",
        ["Hel", "lo"],
        _error("worker_lost", SPENT),
        "error",
        "error",
        None,
        500,
        13,
    ),
    # the web tier's watchdog reports no usage: the streamed tokens alone
    Case(
        "no_worker_midway",
        ["Hel", "lo", "!"],
        _error("worker_unavailable"),
        "error",
        "error",
        None,
        503,
        3,
    ),
    # before the first token nothing is billed, whatever the event reports
    Case(
        "engine_error_first",
        [],
        _error("engine_error", SPENT),
        "error",
        "error",
        None,
        500,
        0,
    ),
    Case("queue_timeout", [], _error("queue_timeout"), "error", "error", None, 503, 0),
    Case("no_worker", [], _error("worker_unavailable"), "error", "error", None, 503, 0),
    Case(
        "context_overflow",
        [],
        _error("context_overflow"),
        "error",
        "error",
        None,
        400,
        0,
    ),
]


def _write_generation(job_id: str, case: Case) -> None:
    """Write the generation's events as a worker does (protocol schemas enforced)."""
    client = redis_sync()
    key = keys.gen_key(job_id)
    client.xadd(
        key,
        protocol.event_fields(
            protocol.EVENT_META, {"model": "scripted-1", "worker": "w1", "queue_ms": 1}
        ),
    )
    for text in case.tokens:
        client.xadd(key, protocol.token_fields(text))
    event_type, payload = case.terminal
    inference_client.terminal_append(
        client, job_id=job_id, event_type=event_type, payload=payload, ttl_s=600
    )


def _record(job_id: str) -> UsageRecord:
    return UsageRecord.objects.get(job_id=job_id)


async def _chat_outcome(user: Any, case: Case) -> dict[str, Any]:
    client = Client()
    await sync_to_async(client.force_login)(user)
    turn = await sync_to_async(chat.turn_start)(user=user, content="Say hello")
    answer = turn.assistant_message
    await sync_to_async(_write_generation)(answer.job_id, case)
    result = await asgi_sse(
        reverse("message-stream", args=[turn.conversation.id, answer.id]),
        cookie=session_cookie(client),
    )
    final = result.events[-1]
    message = await Message.objects.aget(id=answer.id)
    record = await sync_to_async(_record)(answer.job_id)
    return {
        "status": message.status,
        "record_status": record.status,
        "finish_reason": message.finish_reason,
        "billed": record.prompt_tokens + record.completion_tokens,
        "token_count_billed": message.token_count == record.completion_tokens,
        "text": message.content,
        "frame": final.event,
        "code": final.data.get("code"),
    }


async def _api_outcome(user: Any, case: Case, *, stream: bool) -> dict[str, Any]:
    started = await sync_to_async(generations.generation_start)(
        generations.GenerationRequest(
            user=user,
            messages=[{"role": "user", "content": "Say hello"}],
            params={"max_tokens": 16},
            surface=generations.Surface.API,
        )
    )
    generation = started.generation
    await sync_to_async(_write_generation)(generation.job_id, case)
    out: dict[str, Any] = {}
    if stream:
        lines = [line async for line in api.completion_stream(generation, True)]
        objects = [
            json.loads(line[len("data: ") :])
            for line in lines
            if line.startswith("data: {")
        ]
        last = objects[-1]
        if "error" in last:
            out["openai"], out["code"] = None, last["error"]["code"]
        else:
            finishes = [
                c["choices"][0]["finish_reason"] for c in objects if c["choices"]
            ]
            out["openai"] = finishes[-1]
            out["text"] = "".join(
                c["choices"][0]["delta"].get("content", "")
                for c in objects
                if c["choices"]
            )
    else:
        try:
            response = JsonResponse(await api.completion_collect(generation))
        except DomainError as exc:
            response = error_response(exc, openai=True)
        body = json.loads(response.content)
        out["http_status"] = response.status_code
        if response.status_code == 200:
            out["openai"] = body["choices"][0]["finish_reason"]
            out["text"] = body["choices"][0]["message"]["content"]
        else:
            out["openai"], out["code"] = None, body["error"]["code"]
    record = await sync_to_async(_record)(generation.job_id)
    out["record_status"] = record.status
    out["billed"] = record.prompt_tokens + record.completion_tokens
    return out


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
async def test_chat_and_api_reach_the_same_outcome_for_each_terminal_event(
    user, case: Case
):
    fake_heartbeat()  # admitted; the "worker" here is the test writing the stream
    chat_out = await _chat_outcome(user, case)
    api_out = await _api_outcome(user, case, stream=False)
    api_stream = await _api_outcome(user, case, stream=True)
    code = case.terminal[1].get("code")

    assert chat_out["status"] == chat_out["record_status"] == case.status
    assert chat_out["finish_reason"] == case.finish_reason
    assert (
        chat_out["billed"] == api_out["billed"] == api_stream["billed"] == case.billed
    )
    assert chat_out["token_count_billed"]  # the answer's token_count is what was billed
    # the quota holds exactly what the three usage records bill, nothing reserved
    windows = await sync_to_async(quota.quota_windows)(
        user_id=user.pk, limits=quota.Limits(per_day=10**9)
    )
    assert windows[1].used == 3 * case.billed
    assert await sync_to_async(no_reservations)()
    assert api_out["record_status"] == api_stream["record_status"] == case.status
    assert api_out["http_status"] == case.http_status
    assert api_out["openai"] == api_stream["openai"] == case.openai
    text = "".join(case.tokens)
    assert chat_out["text"] == text
    if case.openai is None:  # an error: the same code on every surface
        assert chat_out["frame"] == "error"
        assert api_out["code"] == api_stream["code"] == code
    else:
        assert chat_out["frame"] == "done"
        assert api_out["text"] == api_stream["text"] == text


async def test_a_redis_failure_mid_stream_ends_both_surfaces_with_a_clear_error(
    user, monkeypatch
):
    """A broken stream read is an ``error`` frame / OpenAI error chunk, not a dropped
    connection; nothing stays reserved for the API request (the chat's answer is left
    streaming for the reaper, which settles it once Redis is back)."""
    fake_heartbeat()
    client = Client()
    await sync_to_async(client.force_login)(user)
    turn = await sync_to_async(chat.turn_start)(user=user, content="Say hello")
    started = await sync_to_async(generations.generation_start)(
        generations.GenerationRequest(
            user=user,
            messages=[{"role": "user", "content": "hi"}],
            params={},
            surface=generations.Surface.API,
        )
    )

    async def broken_read(*args: Any, **kwargs: Any) -> list[protocol.Event]:
        raise RedisConnectionError("Connection refused")

    # the followers' reads (the stream hub) and the API's read after it leaves
    monkeypatch.setattr(streams.StreamHub, "_read", broken_read)
    monkeypatch.setattr(inference_client, "agen_read", broken_read)
    answer = turn.assistant_message
    result = await asgi_sse(
        reverse("message-stream", args=[turn.conversation.id, answer.id]),
        cookie=session_cookie(client),
    )
    assert result.completed
    error = result.events[-1]
    assert error.event == "error"
    assert error.data["code"] == "stream_interrupted" and error.data["retryable"]
    lines = [line async for line in api.completion_stream(started.generation, False)]
    body = json.loads(lines[-1][len("data: ") :])
    assert body["error"]["code"] == "stream_interrupted"
    assert body["error"]["type"] == "server_error"


class CutOnSecret(policy.StreamPolicy):
    """A test policy: holds back the last 6 characters (a word could be forming) and
    cuts the answer where "secret" appears."""

    WORD = "secret"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.buffer = ""

    def feed(self, text: str) -> policy.Release:
        self.buffer += text
        at = self.buffer.find(self.WORD)
        if at >= 0:
            released, self.buffer = self.buffer[:at], ""
            return policy.Release(released, cut=True)
        keep = len(self.WORD)
        released, self.buffer = self.buffer[:-keep], self.buffer[-keep:]
        return policy.Release(released)

    def finish(self) -> policy.Release:
        released, self.buffer = self.buffer, ""
        return policy.Release(released)


@pytest.mark.parametrize("surface", ["chat", "api"])
async def test_a_stream_policy_cuts_the_text_before_any_surface_sees_it(
    user, settings, surface
):
    settings.GATEWAY_STREAM_POLICIES = [f"{__name__}.CutOnSecret"]
    fake_heartbeat()
    case = Case(
        "cut",
        ["The pass", "word is sec", "ret: 1234", " and more"],
        _done("cancelled"),  # the engine stopped after the cut cancelled it
        "filtered",
        "content_filter",
        "content_filter",
        200,
        14,
    )
    if surface == "chat":
        out = await _chat_outcome(user, case)
        assert out["status"] == out["record_status"] == "filtered"
        assert out["finish_reason"] == "content_filter"
        assert out["text"] == "The password is "
    else:
        out = await _api_outcome(user, case, stream=True)
        assert out["openai"] == "content_filter"
        assert out["text"] == "The password is "
        assert out["record_status"] == "filtered"
    assert "secret" not in out["text"] and out["billed"] == 14


@pytest.mark.parametrize("stream", [False, True])
async def test_an_api_prompt_over_the_context_window_is_a_400_before_anything_runs(
    user, enqueued, pool_heartbeat, stream
):
    """Streamed or not, the same clear 400 at once: no 200 followed by an error chunk,
    nothing reserved, nothing enqueued."""
    await sync_to_async(factories.pool)("default", max_context=64)
    key = (await sync_to_async(gateway_services.api_key_create)(user=user))[1]
    long = " ".join(["word"] * 200)
    body = ask(messages=[{"role": "user", "content": long}], stream=stream)
    result = await asgi("POST", "/v1/chat/completions", body=body, key=key)
    assert result.status == 400
    error = result.json()["error"]
    assert (error["code"], error["param"]) == ("context_overflow", "messages")
    assert "at most 64 tokens" in error["message"]
    assert enqueued == [] and no_reservations()


@pytest.mark.parametrize("stream", [False, True])
async def test_an_api_prompt_plus_max_tokens_over_the_window_is_a_400_before_anything_runs(
    user, enqueued, pool_heartbeat, stream
):
    """A prompt that fits but leaves no room for the asked ``max_tokens`` is refused
    as OpenAI and vLLM refuse it (one request would otherwise hold a worker for an
    answer the model cannot write)."""
    await sync_to_async(factories.pool)("default", max_context=256)
    key = (await sync_to_async(gateway_services.api_key_create)(user=user))[1]
    messages = [{"role": "user", "content": " ".join(["word"] * 150)}]
    body = ask(messages=messages, stream=stream, max_tokens=200)
    result = await asgi("POST", "/v1/chat/completions", body=body, key=key)
    assert result.status == 400, result.body
    error = result.json()["error"]
    assert (error["code"], error["param"]) == ("context_overflow", "messages")
    assert "maximum context length is 256 tokens" in error["message"]
    assert "200 in the completion" in error["message"]
    assert enqueued == [] and no_reservations()


def test_a_chat_message_over_the_context_window_is_a_400_and_stores_nothing(
    user, enqueued, pool_heartbeat
):
    factories.pool("default", max_context=64)
    client = Client()
    client.force_login(user)
    long = " ".join(["word"] * 200)
    response = client.post(reverse("message-send-new"), {"content": long})
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "context_overflow"
    assert not Message.objects.exists() and enqueued == [] and no_reservations()


async def test_every_token_billed_is_charged_to_the_quota_whichever_way_it_ends(
    user, start_worker
):
    """Chat and API answers that complete, are stopped, hit max_tokens, come from the
    cache, or lose their client: the day window holds exactly the tokens of the usage
    records, and nothing stays reserved."""
    from inference.engines.scripted import ScriptedEngine

    start_worker(ScriptedEngine(text=" ".join(["word"] * 60), delay_ms=5))
    client = Client()
    await sync_to_async(client.force_login)(user)
    cookie = session_cookie(client)
    for content in ("one", "two"):  # chat: complete
        turn = await sync_to_async(chat.turn_start)(user=user, content=content)
        await asgi_sse(
            reverse(
                "message-stream",
                args=[turn.conversation.id, turn.assistant_message.id],
            ),
            cookie=cookie,
        )
    turn = await sync_to_async(chat.turn_start)(user=user, content="stop me")
    pressed: list[bool] = []

    def press_stop(result: Any) -> bool:  # Stop after a few tokens, keep reading
        if not pressed and sum(e.event == "token" for e in result.events) >= 3:
            pressed.append(True)
            generations.generation_cancel(job_id=turn.assistant_message.job_id)
        return False

    stopped = await asgi_sse(
        reverse(
            "message-stream", args=[turn.conversation.id, turn.assistant_message.id]
        ),
        cookie=cookie,
        stop_when=press_stop,
    )
    assert stopped.last("done").data["status"] == "cancelled"
    key = (await sync_to_async(gateway_services.api_key_create)(user=user))[1]
    await sync_to_async(factories.pool)("default", model="scripted-1")
    for body in (
        ask(),  # complete
        ask(max_tokens=5),  # cut by max_tokens
        ask(temperature=0),  # fills the exact cache
        ask(temperature=0),  # a cache hit: 0 tokens
        ask(stream=True),
    ):
        result = await asgi("POST", "/v1/chat/completions", body=body, key=key)
        assert result.status == 200
    # an API client that leaves after its first chunks
    await asgi(
        "POST",
        "/v1/chat/completions",
        body=ask(stream=True),
        key=key,
        disconnect_when=lambda r: r.body.count(b"data: ") >= 4,
    )

    def settled() -> bool:
        return (
            no_reservations()
            and not Message.objects.filter(status=Message.Status.STREAMING).exists()
        )

    deadline = asyncio.get_running_loop().time() + 20
    while not await sync_to_async(settled)():
        assert asyncio.get_running_loop().time() < deadline, "left unsettled"
        await asyncio.sleep(0.05)

    def totals() -> tuple[int, int]:
        records = UsageRecord.objects.filter(user=user)
        billed = sum(r.prompt_tokens + r.completion_tokens for r in records)
        windows = quota.quota_windows(
            user_id=user.pk, limits=quota.Limits(per_day=10**9)
        )
        return billed, windows[1].used

    billed, charged = await sync_to_async(totals)()
    assert billed > 0 and charged == billed


def _serve_one(pool: str, case: Case) -> None:
    """Take the one job of ``pool``'s queue and write ``case``'s events for it, as a
    worker does."""
    client = redis_sync()
    deadline = time.time() + 10
    while not (entries := client.xrange(keys.queue_key(pool))):
        assert time.time() < deadline, "no job was enqueued"
        time.sleep(0.01)
    _write_generation(protocol.Job.from_fields(entries[0][1]).job_id, case)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_a_background_generation_reads_each_terminal_event_as_the_gateway_does(
    case: Case,
):
    pool = f"background-{case.name}"
    worker = threading.Thread(target=_serve_one, args=(pool, case))
    worker.start()
    end = inference_client.generation_run(
        pool=pool,
        messages=[{"role": "user", "content": "Say hello"}],
        params={"max_tokens": 16},
        timeout_s=10,
    )
    worker.join()
    outcome = generations.outcome_from_events(
        inference_client.generation_events(job_id=end.job_id)
    )
    assert end.status == outcome.status == case.status
    assert end.finish_reason == outcome.finish_reason == case.finish_reason
    assert end.text == outcome.text == "".join(case.tokens)
    assert end.usage.total_tokens == outcome.usage.total_tokens == case.billed
    assert end.error_code == (outcome.error.code if outcome.error else "")
    assert end.error_code == case.terminal[1].get("code", "")
    assert outcome.openai_finish_reason == case.openai
    assert end.complete == (case.name == "stop")


@pytest.mark.parametrize("affinity", [False, True])
def test_a_submission_serialises_its_job_once_and_keeps_what_it_queued(
    monkeypatch, settings, affinity
):
    """The job kept for a fallback retry and the queue entry are one JSON text, made
    once (a client resending a long history pays for one serialisation): on the
    pool's queue, and on a worker's own stream when affinity routes it there."""
    settings.INFERENCE_AFFINITY = affinity
    messages = [{"role": "user", "content": "Say hello " + "é" * 50}]
    if affinity:  # the conversation's recorded worker is live and free
        redis_sync().hset(
            keys.worker_key("kept-w1"),
            mapping={
                "heartbeat": f"{time.time():.3f}",
                "slots": 2,
                "busy": 0,
                "preemptible": 0,
                "stopping": 0,
                "pool": "kept-pool",
            },
        )
        conversation = affinity_of(user_ref="7", messages=messages)
        redis_sync().set(keys.affinity_key("kept-pool", conversation), "kept-w1")
    made = []
    to_fields = protocol.Job.to_fields

    def counted(job: protocol.Job) -> Any:
        made.append(job.job_id)
        return to_fields(job)

    monkeypatch.setattr(protocol.Job, "to_fields", counted)
    generations.generation_submit(
        user_id=7,
        job_id="kept-job",
        messages=messages,
        params={"max_tokens": 16},
        user_ref="7",
        pool="kept-pool",
    )
    queue = (
        keys.worker_queue_key("kept-pool", "kept-w1")
        if affinity
        else keys.queue_key("kept-pool")
    )
    [(_entry_id, fields)] = redis_sync().xrange(queue)
    assert made == ["kept-job"]
    assert redis_sync().get(keys.job_key("kept-job")) == fields["job"]
    assert protocol.Job.from_fields(fields).messages == messages


def test_gateway_and_background_generations_enqueue_the_same_job():
    messages = [{"role": "user", "content": "Say hello"}]
    params = {"max_tokens": 16, "temperature": 0.2}
    generations.generation_submit(
        user_id=7,
        job_id="gateway-job",
        messages=messages,
        params=params,
        user_ref="7",
        pool="gateway-pool",
    )
    end = inference_client.generation_run(
        pool="background-pool",
        messages=messages,
        params=params,
        user_ref="7",
        timeout_s=0.3,
    )
    assert end.error_code == protocol.ERROR_QUEUE_TIMEOUT  # nobody served it
    jobs = {}
    for pool in ("gateway-pool", "background-pool"):
        [(_entry_id, fields)] = redis_sync().xrange(keys.queue_key(pool))
        jobs[pool] = protocol.Job.from_fields(fields)
    gateway_job, background_job = jobs["gateway-pool"], jobs["background-pool"]
    assert gateway_job.job_id == "gateway-job"
    assert background_job.job_id == end.job_id

    def fields(job: protocol.Job) -> dict[str, Any]:
        return {
            k: v
            for k, v in asdict(job).items()
            # affinity: the gateway's conversation routing hint (inference.affinity);
            # a background generation (titles, summaries) goes to any worker
            if k not in ("job_id", "enqueued_at", "deadline", "affinity")
        }

    assert fields(gateway_job) == fields(background_job)
    assert gateway_job.deadline - gateway_job.enqueued_at == pytest.approx(
        settings.INFERENCE_QUEUE_TIMEOUT_S
    )
    assert background_job.deadline - background_job.enqueued_at == pytest.approx(
        0.3, abs=0.05
    )
