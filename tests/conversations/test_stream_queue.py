"""The chat's SSE ``queue`` event: while an answer waits for a free worker the relay
reports its place in the pool's queue about once a second, and stops once it runs
(conversations/sse.py, gateway/generations/follow.py, inference/waiting.py)."""

from __future__ import annotations

import asyncio

import pytest
from asgiref.sync import sync_to_async
from django.test import Client
from django.urls import reverse

from conversations import services
from conversations.events import sse_validate
from inference import keys, protocol, waiting
from inference.connections import redis_sync
from inference.engines.scripted import ScriptedEngine
from tests.conftest import fake_heartbeat
from tests.sse import SseResult, asgi_sse, ended, session_cookie

pytestmark = pytest.mark.django_db(transaction=True)


def _stream_url(turn) -> str:
    return reverse(
        "message-stream", args=[turn.conversation.id, turn.assistant_message.id]
    )


async def _cookie(user) -> str:
    client = Client()
    await sync_to_async(client.force_login)(user)
    return session_cookie(client)


def _take_one(pool: str = "default") -> None:
    """Deliver the oldest waiting job to a fake consumer (as a worker's read does)."""
    key = keys.queue_key(pool)
    client = redis_sync()
    if not any(g["name"] == protocol.GROUP for g in client.xinfo_groups(key)):
        client.xgroup_create(key, protocol.GROUP, id="0")
    client.xreadgroup(protocol.GROUP, "fake-consumer", {key: ">"}, count=1)


def _positions(result: SseResult) -> list[int]:
    return [e.data["position"] for e in result.events if e.event == "queue"]


async def test_queue_position_counts_only_the_jobs_still_waiting_ahead(user):
    fake_heartbeat()
    first = await sync_to_async(services.turn_start)(user=user, content="one")
    second = await sync_to_async(services.turn_start)(user=user, content="two")
    job_a, job_b = (str(t.assistant_message.job_id) for t in (first, second))
    assert await waiting.aqueue_position(pool="default", job_id=job_a) == 1
    assert await waiting.aqueue_position(pool="default", job_id=job_b) == 2
    await sync_to_async(_take_one)()  # a worker takes the first one: it is running
    assert await waiting.aqueue_position(pool="default", job_id=job_a) == 0
    assert await waiting.aqueue_position(pool="default", job_id=job_b) == 1
    unknown = protocol.new_job_id()
    assert await waiting.aqueue_position(pool="default", job_id=unknown) == 0
    assert await waiting.aqueue_position(pool="nopool", job_id=job_b) == 0


async def test_a_waiting_answer_streams_its_queue_position_as_jobs_ahead_are_taken(
    user,
):
    fake_heartbeat()
    await sync_to_async(services.turn_start)(user=user, content="ahead")
    turn = await sync_to_async(services.turn_start)(user=user, content="mine")
    taken = False

    def progress(result: SseResult) -> bool:
        nonlocal taken
        positions = _positions(result)
        if positions and positions[-1] == 2 and not taken:
            _take_one()  # the job ahead starts running: ours moves up
            taken = True
        return bool(positions) and positions[-1] == 1

    result = await asgi_sse(
        _stream_url(turn), cookie=await _cookie(user), stop_when=progress, timeout=30
    )
    assert _positions(result)[0] == 2 and _positions(result)[-1] == 1
    for event in result.events:
        sse_validate(event.event, event.data)
    queue_frames = [e for e in result.events if e.event == "queue"]
    assert all(e.id is None for e in queue_frames)  # a resume point stays a stream id


async def test_queue_frames_stop_once_a_worker_starts_the_answer(
    user, settings, start_worker
):
    """A worker with one slot runs a slow answer; the next one waits (position 1),
    then streams with no queue frame after its ``meta``."""
    settings.CHAT_MAX_TOKENS = 25
    start_worker(
        ScriptedEngine(text="word " * 5, delay_ms=100, cycle=True), concurrency=1
    )
    await sync_to_async(services.turn_start)(user=user, content="slow one")
    turn = await sync_to_async(services.turn_start)(user=user, content="mine")
    result = await asgi_sse(
        _stream_url(turn), cookie=await _cookie(user), stop_when=ended, timeout=60
    )
    kinds = [e.event for e in result.events]
    assert "queue" in kinds and kinds[-1] == "done"
    assert "queue" not in kinds[kinds.index("meta") :]
    assert set(_positions(result)) <= {0, 1}
    assert 1 in _positions(result)
    for event in result.events:
        sse_validate(event.event, event.data)


async def test_meta_arrives_while_the_prompt_is_read_before_the_first_token(
    user, start_worker
):
    """The page's "Reading the conversation…" comes from the ``meta`` frame: it is
    relayed as soon as the worker starts on the prompt, seconds before the first
    token of an engine that takes that long to read it."""
    start_worker(ScriptedEngine(text="hello there", first_delay_ms=1500))
    turn = await sync_to_async(services.turn_start)(user=user, content="long story")
    seen: dict[str, float] = {}

    def mark(result: SseResult) -> bool:
        for event in result.events:
            seen.setdefault(event.event, len(result.events))
        return ended(result)

    result = await asgi_sse(
        _stream_url(turn), cookie=await _cookie(user), stop_when=mark, timeout=30
    )
    kinds = [e.event for e in result.events]
    assert kinds.index("meta") < kinds.index("token")
    # the meta frame was read on its own, before the token frames existed
    assert seen["meta"] < seen["token"]
    assert result.text == "hello there"


def test_a_job_entry_begins_with_its_prefix():
    job = protocol.Job(job_id=protocol.new_job_id(), messages=[{"role": "user"}])
    assert job.to_fields()["job"].startswith(protocol.job_entry_prefix(job.job_id))
    other = protocol.new_job_id()
    assert not job.to_fields()["job"].startswith(protocol.job_entry_prefix(other))


async def test_stopping_a_queued_answer_ends_it_at_once_and_no_worker_runs_it(
    user, start_worker
):
    """Stop on an answer still waiting for a worker: its stream ends with ``done``
    (cancelled) without waiting for one, the answer is stored as stopped and empty,
    and a worker that takes the job afterwards skips it (writes nothing)."""
    fake_heartbeat()
    turn = await sync_to_async(services.turn_start)(user=user, content="mine")
    answer = turn.assistant_message
    await sync_to_async(services.turn_stop)(
        user=user, conversation_id=turn.conversation.id, message_id=answer.id
    )
    result = await asgi_sse(
        _stream_url(turn), cookie=await _cookie(user), stop_when=ended, timeout=30
    )
    assert [e.event for e in result.events if e.event != "queue"] == ["done"]
    assert result.last("done").data["finish_reason"] == "cancelled"
    await sync_to_async(answer.refresh_from_db)()
    assert answer.status == answer.Status.CANCELLED and answer.content == ""

    await sync_to_async(start_worker)(ScriptedEngine(text="never shown"))
    client = redis_sync()
    queue = keys.queue_key("default")
    for _ in range(300):  # the worker takes the job and deletes its entry
        if client.xlen(queue) == 0:
            break
        await asyncio.sleep(0.05)
    assert client.xlen(queue) == 0
    entries = client.xrange(keys.gen_key(str(answer.job_id)))
    assert [fields["e"] for _id, fields in entries] == ["done"]
    await sync_to_async(answer.refresh_from_db)()
    assert answer.status == answer.Status.CANCELLED and answer.content == ""
