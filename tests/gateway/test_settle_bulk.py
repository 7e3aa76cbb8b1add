"""Answers that end together settle in bulk (gateway/generations/settle_bulk.py): each
once, with one usage record and its quota, and one item's failure spares the others;
against the real PostgreSQL and Redis."""

from __future__ import annotations

import asyncio
import contextvars
import threading

import pytest
from asgiref.sync import sync_to_async
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from conversations import services as chat
from conversations.models import Conversation, Message
from gateway import generations, quota
from gateway.generations import settle_bulk
from gateway.models import UsageRecord
from inference import client as inference_client
from inference import keys, protocol
from inference.connections import redis_sync
from tests.conftest import fake_heartbeat
from tests.conversations.openai.helpers import no_reservations
from tests.sse import asgi_sse, session_cookie

pytestmark = pytest.mark.django_db(transaction=True)

USAGE = {"prompt_tokens": 11, "completion_tokens": 2, "cached_tokens": 0}
BILLED = 13
LIMITS = quota.Limits(per_day=10**9)


def _write(job_id: str, words: list[str]) -> None:
    """Write a whole generation's events as a worker does."""
    client = redis_sync()
    key = keys.gen_key(job_id)
    client.xadd(
        key,
        protocol.event_fields(
            protocol.EVENT_META, {"model": "scripted-1", "worker": "w1", "queue_ms": 1}
        ),
    )
    for word in words:
        client.xadd(key, protocol.token_fields(word))
    inference_client.terminal_append(
        client,
        job_id=job_id,
        event_type=protocol.EVENT_DONE,
        payload={
            "finish_reason": "stop",
            "usage": USAGE,
            "ttft_ms": 5,
            "latency_ms": 20,
        },
        ttl_s=600,
    )


def _answers(user, n: int, *, ended: bool = True) -> list[Message]:
    """Start ``n`` turns (reserved, enqueued); their generations ended unless not."""
    fake_heartbeat()
    answers = []
    for i in range(n):
        answer = chat.turn_start(user=user, content=f"hi {i}").assistant_message
        if ended:
            _write(answer.job_id, [f"answer {i}", "."])
        answers.append(answer)
    return answers


def _call(answer: Message, *, user_id: int | None = None):
    generation = chat.message_generation(answer, user_id=user_id)
    kwargs = {
        "generation": generation,
        "recorder": chat.RECORDER,
        "message_id": answer.id,
    }
    return contextvars.copy_context(), (), kwargs


def _day_used(user) -> int:
    return quota.quota_windows(user_id=user.pk, limits=LIMITS)[1].used


def test_answers_ending_together_settle_once_each_in_a_few_queries(user):
    answers = _answers(user, 12)
    before = {c.id: c.updated_at for c in Conversation.objects.all()}
    with CaptureQueriesContext(connection) as queries:
        results = settle_bulk.generations_settle_bulk([_call(a) for a in answers])

    assert [(ok, r.state) for ok, r in results] == [(True, "settled")] * 12
    # one transaction whatever the batch's size: BEGIN, the answers' UPDATE, their
    # conversations', the pools (3 queries: not cached in tests), the usage INSERT
    assert len(queries) <= 8
    for i, answer in enumerate(answers):
        answer.refresh_from_db()
        assert answer.status == Message.Status.COMPLETE
        assert answer.content == f"answer {i}."
        assert (answer.token_count, answer.prompt_tokens) == (2, 11)
        assert (answer.ttft_ms, answer.latency_ms) == (5, 20)
        assert (answer.finish_reason, answer.model) == ("stop", "scripted-1")
        record = UsageRecord.objects.get(job_id=answer.job_id)
        assert (record.total_tokens, record.message_id) == (BILLED, answer.id)
        assert (record.status, record.user_id, record.cache_hit) == (
            "complete",
            user.pk,
            False,
        )
    assert UsageRecord.objects.count() == 12
    assert all(c.updated_at > before[c.id] for c in Conversation.objects.all())
    assert _day_used(user) == 12 * BILLED  # the windows hold what the records bill
    assert no_reservations()

    again = settle_bulk.generations_settle_bulk([_call(a) for a in answers])
    assert [r.state for _ok, r in again] == ["already"] * 12
    assert UsageRecord.objects.count() == 12
    assert _day_used(user) == 12 * BILLED


def test_a_batch_answers_each_call_running_settled_or_api(user):
    running, ended = _answers(user, 1, ended=False) + _answers(user, 1)
    started = generations.generation_start(
        generations.GenerationRequest(
            user=user,
            messages=[{"role": "user", "content": "hi"}],
            params={"max_tokens": 16},
            surface=generations.Surface.API,
        )
    )
    _write(started.generation.job_id, ["api", "!"])
    api_call = (
        contextvars.copy_context(),
        (),
        {"generation": started.generation, "recorder": None, "message_id": None},
    )

    results = settle_bulk.generations_settle_bulk(
        [_call(running), _call(ended), api_call]
    )

    assert [r.state for _ok, r in results] == ["running", "settled", "settled"]
    assert results[2][1].outcome.text == "api!"
    assert UsageRecord.objects.filter(job_id=running.job_id).count() == 0
    assert UsageRecord.objects.filter(job_id=started.generation.job_id).count() == 1
    running.refresh_from_db()
    assert running.status == Message.Status.STREAMING
    assert _day_used(user) > 2 * BILLED  # the running one is still reserved
    assert settle_bulk.generations_settle_bulk([api_call])[0][1].state == "already"


def test_one_failing_item_neither_loses_nor_doubles_the_others(user):
    answers = _answers(user, 6)
    calls = [_call(a) for a in answers]
    calls[2] = _call(answers[2], user_id=10**9)  # its usage row cannot be inserted

    results = settle_bulk.generations_settle_bulk(calls)

    ok, error = results[2]
    assert not ok and "foreign key" in str(error).lower()
    assert [r.state for k, (_ok, r) in enumerate(results) if k != 2] == ["settled"] * 5
    answers[2].refresh_from_db()
    assert answers[2].status == Message.Status.STREAMING  # nothing of it was kept
    settled = [a.job_id for k, a in enumerate(answers) if k != 2]
    assert sorted(UsageRecord.objects.values_list("job_id", flat=True)) == sorted(
        settled
    )
    assert _day_used(user) > 5 * BILLED  # the failed one's reservation is kept

    # its next settlement (the relay's retry, or the reaper) settles it, once
    assert chat.message_finalize(message_id=answers[2].id) is not None
    assert UsageRecord.objects.count() == 6
    assert _day_used(user) == 6 * BILLED
    assert no_reservations()


def test_bulk_and_single_settlers_racing_settle_each_answer_once(user):
    answers = _answers(user, 10)
    settled_alone: list[bool] = []
    bulk_results: list = []

    def alone(answer: Message) -> None:
        try:
            settled_alone.append(
                chat.message_finalize(message_id=answer.id) is not None
            )
        finally:
            connection.close()

    def bulk() -> None:
        try:
            bulk_results.extend(
                settle_bulk.generations_settle_bulk([_call(a) for a in answers])
            )
        finally:
            connection.close()

    threads = [threading.Thread(target=bulk)]
    threads += [threading.Thread(target=alone, args=(a,)) for a in answers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    by_bulk = sum(ok and r.state == "settled" for ok, r in bulk_results)
    assert by_bulk + sum(settled_alone) == 10  # each by exactly one of them
    assert all(ok for ok, _r in bulk_results)
    assert UsageRecord.objects.count() == 10
    assert set(
        Message.objects.filter(id__in=[a.id for a in answers]).values_list(
            "status", flat=True
        )
    ) == {Message.Status.COMPLETE}
    assert _day_used(user) == 10 * BILLED
    assert no_reservations()


async def test_streams_ending_together_each_get_their_done_frame_in_batches(
    user, monkeypatch
):
    batches: list[int] = []
    bulk = settle_bulk.generations_settle_bulk

    def counted(calls):
        batches.append(len(calls))
        return bulk(calls)

    monkeypatch.setattr(
        settle_bulk,
        "_settle_batched",
        settle_bulk.db_bulk(counted, settle_bulk.generation_settle),
    )
    answers = await sync_to_async(_answers)(user, 16)
    client = Client()
    await sync_to_async(client.force_login)(user)
    cookie = session_cookie(client)

    results = await asyncio.gather(
        *(
            asgi_sse(
                reverse("message-stream", args=[a.conversation_id, a.id]),
                cookie=cookie,
            )
            for a in answers
        )
    )

    for i, (answer, result) in enumerate(zip(answers, results, strict=True)):
        done = result.last("done")
        assert done is not None, result.events
        assert done.data["message_id"] == str(answer.id)
        assert done.data["status"] == "complete"
        assert done.data["content"] == f"answer {i}."
        assert done.data["usage"]["completion_tokens"] == 2
    assert sum(batches) == 16  # every settlement went through the bulk path
    assert await UsageRecord.objects.acount() == 16
    assert await sync_to_async(_day_used)(user) == 16 * BILLED
    assert await sync_to_async(no_reservations)()


def test_an_answer_followed_twice_in_one_batch_is_settled_once(user):
    """Two tabs follow one answer: both settle it in the same batch."""
    [answer] = _answers(user, 1)

    results = settle_bulk.generations_settle_bulk([_call(answer), _call(answer)])

    assert [r.state for _ok, r in results] == ["settled", "already"]
    assert UsageRecord.objects.filter(job_id=answer.job_id).count() == 1
    assert _day_used(user) == BILLED
