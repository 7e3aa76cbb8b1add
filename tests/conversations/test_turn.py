"""The chat turn end to end through the real ASGI app, Redis and a worker
(conversations/services/, conversations/sse.py, gateway/generations/)."""

import asyncio
import threading
import time

import pytest
from asgiref.sync import sync_to_async
from django.test import Client
from django.urls import reverse

from conversations import services
from conversations.models import Conversation, Message
from inference import client as inference_client
from inference import keys
from inference.connections import redis_sync
from inference.engines.scripted import ScriptedEngine
from tests.conftest import fake_heartbeat, fake_heartbeat_stop
from tests.sse import asgi_sse, ended, session_cookie

pytestmark = pytest.mark.django_db(transaction=True)


def stream_url(turn):
    return reverse(
        "message-stream", args=[turn.conversation.id, turn.assistant_message.id]
    )


def send(client: Client, content: str, conversation_id=None):
    url = (
        reverse("message-send", args=[conversation_id])
        if conversation_id
        else reverse("message-send-new")
    )
    return client.post(url, {"content": content})


def test_turn_streams_tokens_and_persists_the_answer_with_usage(
    start_worker, auth_client, user
):
    start_worker(ScriptedEngine(text="Hello there, how can I help?"))
    response = send(auth_client, "Hi!")
    assert response.status_code == 201
    body = response.json()
    result = asyncio.run(
        asgi_sse(
            body["assistant_message"]["stream_url"], cookie=session_cookie(auth_client)
        )
    )
    assert result.status == 200
    assert result.headers["content-type"] == "text/event-stream"
    assert result.completed
    assert result.text == "Hello there, how can I help?"
    done = result.last("done")
    assert done.data["status"] == "complete"
    answer = Message.objects.get(id=body["assistant_message"]["id"])
    assert answer.status == Message.Status.COMPLETE
    assert answer.content == "Hello there, how can I help?"
    # the page adds thumbs under the finished answer from this URL
    assert body["assistant_message"]["feedback_url"] == reverse(
        "message-feedback", args=[answer.conversation_id, answer.id]
    )
    assert answer.token_count == 6 and answer.prompt_tokens > 0
    assert answer.model == "scripted-1"
    assert answer.ttft_ms is not None and answer.latency_ms is not None
    assert done.data["usage"]["completion_tokens"] == 6
    assert "<p>Hello there, how can I help?</p>" in done.data["html"]
    conversation = Conversation.objects.get(id=body["conversation"]["id"])
    assert conversation.user == user
    assert conversation.title == "Hi!"
    assert [m.role for m in conversation.messages.all()] == ["user", "assistant"]


def test_the_model_sees_the_earlier_turns_of_the_thread(start_worker, auth_client):
    start_worker(ScriptedEngine(text="ok"))
    first = send(auth_client, "My name is Ada.").json()
    cookie = session_cookie(auth_client)
    asyncio.run(asgi_sse(first["assistant_message"]["stream_url"], cookie=cookie))
    captured = {}
    original = inference_client.job_enqueue

    def spy(*, pool, job, **options):
        captured["messages"] = job.messages
        return original(pool=pool, job=job, **options)

    inference_client.job_enqueue = spy
    try:
        second = send(
            auth_client, "What is my name?", first["conversation"]["id"]
        ).json()
    finally:
        inference_client.job_enqueue = original
    asyncio.run(asgi_sse(second["assistant_message"]["stream_url"], cookie=cookie))
    roles = [(m["role"], m["content"]) for m in captured["messages"]]
    assert roles[0][0] == "system"
    assert roles[1:] == [
        ("user", "My name is Ada."),
        ("assistant", "ok"),
        ("user", "What is my name?"),
    ]


def test_stop_aborts_generation_within_one_second_and_keeps_the_partial_text(
    start_worker, auth_client
):
    start_worker(ScriptedEngine(text="word ", cycle=True, delay_ms=10))
    turn = services.turn_start(
        user=auth_client.session and _user(auth_client),
        content="Write a lot",
        params={"max_tokens": 2000},
    )
    stop_url = reverse(
        "message-stop", args=[turn.conversation.id, turn.assistant_message.id]
    )
    timing = {}

    def press_stop():
        timing["asked"] = time.monotonic()
        timing["status"] = auth_client.post(stop_url).status_code

    def watch(result):
        tokens = sum(e.event == "token" for e in result.events)
        if tokens >= 5 and "thread" not in timing:
            timing["thread"] = threading.Thread(target=press_stop)
            timing["thread"].start()
        if ended(result) and "ended" not in timing:
            timing["ended"] = time.monotonic()
        return False

    result = asyncio.run(
        asgi_sse(stream_url(turn), cookie=session_cookie(auth_client), stop_when=watch)
    )
    timing["thread"].join()
    assert timing["status"] == 202
    assert timing["ended"] - timing["asked"] < 1.0
    done = result.last("done")
    assert (
        done.data["status"] == "cancelled" and done.data["finish_reason"] == "cancelled"
    )
    answer = Message.objects.get(id=turn.assistant_message.id)
    assert answer.status == Message.Status.CANCELLED
    assert answer.content == result.text
    assert answer.content.startswith("word word ")
    assert 5 <= answer.token_count < 2000


def _user(client):
    from django.contrib.auth import get_user_model

    return get_user_model().objects.get(pk=client.session["_auth_user_id"])


def test_emoji_split_across_two_engine_chunks_arrives_byte_identical(
    start_worker, auth_client
):
    start_worker(ScriptedEngine())
    turn = services.turn_start(
        user=_user(auth_client),
        content="greet",
        params={"script": {"text": "你好世界 🌍", "chunk_bytes": 15}},
    )
    result = asyncio.run(asgi_sse(stream_url(turn), cookie=session_cookie(auth_client)))
    assert result.text.encode() == "你好世界 🌍".encode()
    assert all("\ufffd" not in e.data["t"] for e in result.events if e.event == "token")
    answer = Message.objects.get(id=turn.assistant_message.id)
    assert answer.content == "你好世界 🌍"
    assert answer.token_count == 2  # two engine chunks, the emoji split between them


def test_reconnect_with_last_event_id_yields_exactly_the_rest(
    start_worker, auth_client
):
    # 60 tokens 40 ms apart (2.4 s): the first read stops after 3 frames, well before
    # the end even when a loaded machine coalesces many tokens into one frame
    words = [f"w{i} " for i in range(60)]
    start_worker(ScriptedEngine(delay_ms=40))
    turn = services.turn_start(
        user=_user(auth_client),
        content="count",
        params={"script": {"text": "".join(words)}},
    )
    cookie = session_cookie(auth_client)
    first = asyncio.run(
        asgi_sse(
            stream_url(turn),
            cookie=cookie,
            stop_when=lambda r: sum(e.event == "token" for e in r.events) >= 3,
        )
    )
    assert not first.completed and not ended(first)
    last_id = [e for e in first.events if e.id][-1].id
    rest = asyncio.run(
        asgi_sse(stream_url(turn), cookie=cookie, headers={"Last-Event-ID": last_id})
    )
    assert rest.completed and rest.last("done")
    assert first.text + rest.text == "".join(words)
    assert first.text and rest.text
    # the same resume point through the query string (manual resume)
    ids = [e.id for e in first.events if e.id]
    assert ids == sorted(ids, key=lambda i: tuple(map(int, i.split("-"))))


def test_disconnecting_the_sse_client_runs_the_relay_cleanup(
    start_worker, auth_client, settings
):
    settings.INFERENCE_DETACH_GRACE_S = 0.3
    start_worker(ScriptedEngine(text="tok ", cycle=True, delay_ms=10))
    turn = services.turn_start(
        user=_user(auth_client), content="go", params={"max_tokens": 2000}
    )
    job_id = turn.assistant_message.job_id
    seen = {}

    def watch(result):
        if result.events and "watchers" not in seen:
            seen["watchers"] = redis_sync().get(keys.watch_key(job_id))
        return sum(e.event == "token" for e in result.events) >= 3

    result = asyncio.run(
        asgi_sse(stream_url(turn), cookie=session_cookie(auth_client), stop_when=watch)
    )
    assert not result.completed
    assert seen["watchers"] == "1"
    # cleanup ran: no watcher left, a cancel deadline is scheduled
    assert redis_sync().get(keys.watch_key(job_id)) is None
    deadline = float(redis_sync().get(keys.detached_key(job_id)))
    assert time.time() - 1 < deadline < time.time() + 1
    # ... and with nobody re-attaching, the worker cancels after the grace period
    for _ in range(300):
        events = inference_client.generation_events(job_id=job_id)
        if events and events[-1].is_terminal:
            break
        time.sleep(0.01)
    assert events[-1].data["finish_reason"] == "cancelled"
    services.streaming_messages_reap(older_than_s=0)
    assert Message.objects.get(id=job_id).status == Message.Status.CANCELLED


def test_reattaching_within_the_grace_period_keeps_the_generation_alive(
    start_worker, auth_client, settings
):
    settings.INFERENCE_DETACH_GRACE_S = 0.5
    start_worker(ScriptedEngine(text=" ".join(f"w{i}" for i in range(80)), delay_ms=10))
    turn = services.turn_start(user=_user(auth_client), content="go")
    cookie = session_cookie(auth_client)
    first = asyncio.run(
        asgi_sse(
            stream_url(turn), cookie=cookie, stop_when=lambda r: len(r.events) >= 3
        )
    )
    last_id = [e for e in first.events if e.id][-1].id
    rest = asyncio.run(
        asgi_sse(stream_url(turn), cookie=cookie, headers={"Last-Event-ID": last_id})
    )
    assert rest.last("done").data["status"] == "complete"


def test_worker_down_shows_a_clear_error_after_a_bounded_wait(auth_client, settings):
    settings.INFERENCE_NO_WORKER_GRACE_S = 1.0
    fake_heartbeat()  # a worker is up at admission, then goes away
    turn = services.turn_start(user=_user(auth_client), content="anyone there?")
    fake_heartbeat_stop()
    started = time.monotonic()
    result = asyncio.run(
        asgi_sse(stream_url(turn), cookie=session_cookie(auth_client), timeout=15)
    )
    waited = time.monotonic() - started
    error = result.last("error")
    assert error is not None and result.completed
    assert "no inference worker" in error.data["message"]
    assert waited < 5
    answer = Message.objects.get(id=turn.assistant_message.id)
    assert answer.status == Message.Status.ERROR
    assert "not available" in answer.error


def test_engine_failure_mid_answer_ends_with_an_error_and_keeps_the_partial_text(
    start_worker, auth_client
):
    start_worker(ScriptedEngine(text="one two three four"))
    turn = services.turn_start(
        user=_user(auth_client), content="x", params={"script": {"fail_after": 2}}
    )
    result = asyncio.run(asgi_sse(stream_url(turn), cookie=session_cookie(auth_client)))
    assert result.last("error").data["code"] == "generation_failed"
    answer = Message.objects.get(id=turn.assistant_message.id)
    assert answer.status == Message.Status.ERROR
    assert answer.content == "one two"


def test_reaper_finalises_an_answer_nobody_streamed(start_worker, auth_client):
    start_worker(ScriptedEngine(text="done without a browser"))
    turn = services.turn_start(user=_user(auth_client), content="hi")
    job_id = turn.assistant_message.job_id
    for _ in range(300):
        if (
            inference_client.generation_events(job_id=job_id)[-1:]
            and inference_client.generation_events(job_id=job_id)[-1].is_terminal
        ):
            break
        time.sleep(0.01)
    assert Message.objects.get(id=job_id).status == Message.Status.STREAMING
    from conversations.tasks import reap_streaming_messages

    assert reap_streaming_messages.delay(older_than_s=0).get() == 1
    answer = Message.objects.get(id=job_id)
    assert (answer.status, answer.content) == (
        Message.Status.COMPLETE,
        "done without a browser",
    )
    assert services.message_finalize(message_id=job_id) is None  # idempotent


def test_reaper_times_out_a_job_no_worker_ever_took(auth_client, settings):
    settings.INFERENCE_QUEUE_TIMEOUT_S = 0.0
    fake_heartbeat()  # admitted, but no worker ever takes the job
    turn = services.turn_start(user=_user(auth_client), content="hi")
    time.sleep(0.05)
    assert services.streaming_messages_reap(older_than_s=0) == 1
    answer = Message.objects.get(id=turn.assistant_message.id)
    assert answer.status == Message.Status.ERROR and "in time" in answer.error


def test_stream_of_a_finished_answer_returns_its_final_state(start_worker, auth_client):
    start_worker(ScriptedEngine(text="**bold** <script>alert(1)</script>"))
    turn = services.turn_start(user=_user(auth_client), content="hi")
    cookie = session_cookie(auth_client)
    asyncio.run(asgi_sse(stream_url(turn), cookie=cookie))
    again = asyncio.run(asgi_sse(stream_url(turn), cookie=cookie))
    assert [e.event for e in again.events] == ["done"]
    html = again.events[0].data["html"]
    assert "<strong>bold</strong>" in html
    assert "<script>" not in html and "&lt;script&gt;" in html


def test_bad_last_event_id_is_a_400(auth_client, pool_heartbeat):
    turn = services.turn_start(user=_user(auth_client), content="hi")
    result = asyncio.run(
        asgi_sse(
            stream_url(turn),
            cookie=session_cookie(auth_client),
            headers={"Last-Event-ID": "garbage"},
        )
    )
    assert result.status == 400
    assert b"not a stream position" in result.body


def test_another_user_cannot_stream_your_answer(
    auth_client, other_user, pool_heartbeat
):
    turn = services.turn_start(user=_user(auth_client), content="secret")
    intruder = Client()
    intruder.force_login(other_user)
    result = asyncio.run(asgi_sse(stream_url(turn), cookie=session_cookie(intruder)))
    assert result.status == 404
    assert b"secret" not in result.body
    anonymous = asyncio.run(asgi_sse(stream_url(turn)))
    assert anonymous.status == 302 and "/login/" in anonymous.headers["location"]


def test_last_event_id_beyond_the_redis_id_range_is_a_400(auth_client, pool_heartbeat):
    turn = services.turn_start(user=_user(auth_client), content="hi")
    result = asyncio.run(
        asgi_sse(
            stream_url(turn),
            cookie=session_cookie(auth_client),
            headers={"Last-Event-ID": "99999999999999999999-0"},
        )
    )
    assert result.status == 400


def _connections_checked_out() -> int:
    """Connections taken from this process's database pool and not yet given back."""
    from django.db import connection

    stats = connection.pool.get_stats()
    return stats["pool_size"] - stats["pool_available"]


def test_open_streams_give_their_database_connection_back(start_worker, auth_client):
    """A stream lasts seconds to minutes and needs the database only at its start and
    end: holding a pooled connection meanwhile would cap concurrent streams at the
    pool size (DATABASE_POOL_MAX_SIZE) and leave the next ones waiting."""
    start_worker(ScriptedEngine(text=" ".join(["word"] * 40), delay_ms=50))
    streams = 8
    urls = [
        send(auth_client, f"Question {i}").json()["assistant_message"]["stream_url"]
        for i in range(streams)
    ]
    cookie = session_cookie(auth_client)
    first_token: set[int] = set()

    check = sync_to_async(_connections_checked_out, thread_sensitive=False)

    async def run() -> tuple[int, list]:
        # taken before the streams open: this thread's, and ones earlier tests' sync
        # threads kept (asgiref's shared executor thread keeps its connection)
        before = await check()

        def mark(i: int):
            def stop_when(result) -> bool:
                if any(e.event == "token" for e in result.events):
                    first_token.add(i)
                return False

            return stop_when

        tasks = [
            asyncio.create_task(asgi_sse(url, cookie=cookie, stop_when=mark(i)))
            for i, url in enumerate(urls)
        ]
        while len(first_token) < streams:
            await asyncio.sleep(0.02)
        # the least over a few samples: connections the pool is still opening in the
        # background count as taken for a moment
        samples = []
        for _ in range(5):
            samples.append(await check() - before)
            await asyncio.sleep(0.1)
        return min(samples), await asyncio.gather(*tasks)

    held, results = asyncio.run(run())

    assert all(r.last("done").data["status"] == "complete" for r in results)
    assert held <= 1, f"{held} of {streams} open streams hold a database connection"
