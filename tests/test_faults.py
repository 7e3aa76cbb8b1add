"""Fault drills with real processes (issue 13): an inference worker killed mid-answer,
the web process killed mid-stream and started again, Redis restarted mid-answer.

Each drill's docstring says what the user sees and what is stored. The stack is
uvicorn + scripted workers (tests/stack.py) on the test database, with fast worker
timings (a silent worker is dead after 2 s; live ones reclaim its jobs every 0.5 s).
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from conversations import services as chat
from conversations.models import Message
from gateway import quota
from gateway.models import UsageRecord
from inference import client as inference_client
from inference import keys
from inference.connections import redis_sync
from tests.faults import Browser, PrivateRedis, stream_read
from tests.stack import running_processes, stack_env, web_process

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

FAST_WORKERS = {
    "INFERENCE_HEARTBEAT_S": "0.3",
    "INFERENCE_WORKER_TTL_S": "2",
    "INFERENCE_RECLAIM_S": "0.5",
}
WORDS = 60
TEXT = " ".join(f"w{i}" for i in range(WORDS))


def _worker(delay_ms: int) -> list[str]:
    return [
        "--pool",
        "default",
        "--engine",
        "scripted",
        "--delay-ms",
        str(delay_ms),
        "--script-text",
        TEXT,
    ]


def _wait(condition, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def _answer(turn: dict) -> Message:
    return Message.objects.get(id=turn["assistant_message"]["id"])


def test_worker_killed_mid_answer_the_user_sees_a_clear_error_and_the_answer_is_final(
    user,
):
    """kill -9 of the worker writing an answer. The user sees the tokens written so
    far, then an ``error`` frame (``generation_failed``, retryable) within a few
    seconds (a live worker reclaims the job); stored: the answer as ``error`` with
    the partial text (never left ``streaming``), one UsageRecord (``error``) billing
    what was generated (the prompt, counted by the reclaiming worker's engine, plus
    one completion token per token the stream held: gateway/generations/outcome.py),
    the answer's token counts equal to it, the quota reservation settled to exactly
    that; the next turn in the conversation is answered."""
    with running_processes(
        _worker(150), FAST_WORKERS, extra_workers=[_worker(150)]
    ) as stack:
        browser = Browser(stack.base, user)
        turn = browser.send("tell me a story").json()
        url = turn["assistant_message"]["stream_url"]
        first = stream_read(stack.base, url, browser.cookie, until_tokens=3)
        meta = next(e for e in first.events if e.event == "meta")
        pid = int(meta.data["worker"].split("-")[-2])
        victim = next(p for p in stack.workers if p.pid == pid)
        victim.popen.send_signal(signal.SIGKILL)
        victim.popen.wait(timeout=10)
        killed_at = time.monotonic()
        rest = stream_read(
            stack.base, url, browser.cookie, last_event_id=first.last_id, timeout_s=30
        )
        assert time.monotonic() - killed_at < 15
        assert rest.final is not None and rest.final.event == "error", rest.events
        assert rest.final.data["code"] == "generation_failed"
        assert rest.final.data["message"]
        seen = (first.text + rest.text).strip()
        answer = _answer(turn)
        assert answer.status == Message.Status.ERROR
        assert answer.content.strip() == seen and TEXT.startswith(seen)
        assert 3 <= len(seen.split()) < WORDS
        # settled once, to what was generated: the prompt plus the streamed tokens
        # (each scripted token is one word); the message and the quota agree
        usage = UsageRecord.objects.get(job_id=answer.job_id)
        assert usage.status == UsageRecord.Status.ERROR
        assert usage.completion_tokens == len(seen.split())
        assert usage.prompt_tokens > 0
        assert answer.token_count == usage.completion_tokens
        assert answer.prompt_tokens == usage.prompt_tokens
        assert not redis_sync().exists(keys.reservation_key(user.pk, answer.job_id))
        limits = quota.Limits(per_day=10**6, per_month=10**6)
        windows = quota.quota_windows(user_id=user.pk, limits=limits)
        assert [w.used for w in windows[1:]] == [usage.total_tokens] * 2
        nxt = browser.send("again", conversation_id=turn["conversation"]["id"])
        assert nxt.status_code == 201, nxt.text
        done = stream_read(
            stack.base, nxt.json()["assistant_message"]["stream_url"], browser.cookie
        )
        assert done.final is not None and done.final.event == "done"
        assert _answer(nxt.json()).content == TEXT
        browser.close()


def test_a_stream_closed_mid_answer_is_noticed_and_the_answer_cancelled(user):
    """The browser closes the answer's stream after a few tokens (a tab closed): the
    web server notices the closed connection, the relay detaches (no watcher left, a
    cancel scheduled) and, with nobody back within the grace, the worker cancels the
    generation: it does not run to its end for no one."""
    env = {**FAST_WORKERS, "INFERENCE_DETACH_GRACE_S": "1"}
    with running_processes(_worker(100), env) as stack:
        browser = Browser(stack.base, user)
        turn = browser.send("tell me a story").json()
        job_id = _answer(turn).job_id
        url = turn["assistant_message"]["stream_url"]
        first = stream_read(stack.base, url, browser.cookie, until_tokens=3)
        assert first.final is None and first.last_id
        redis = redis_sync()
        _wait(
            lambda: redis.exists(keys.detached_key(job_id)),
            15,
            "the web process never detached the closed stream",
        )
        assert redis.get(keys.watch_key(job_id)) is None

        def ended() -> bool:
            events = inference_client.generation_events(job_id=job_id)
            return bool(events) and events[-1].is_terminal

        _wait(ended, 15, "the worker never cancelled the abandoned answer")
        last = inference_client.generation_events(job_id=job_id)[-1]
        assert last.data["finish_reason"] == "cancelled"
        assert len(first.text.split()) < WORDS
        browser.close()


def test_web_process_killed_mid_stream_resumes_with_last_event_id_on_a_new_one(user):
    """kill -9 of the web process while it relays an answer; a new one starts. The browser
    reconnects (EventSource does) with Last-Event-ID and receives exactly the rest:
    the text it assembled equals the stored answer, stored once, ``complete``."""
    env = stack_env({**FAST_WORKERS, "INFERENCE_DETACH_GRACE_S": "30"})
    with running_processes(_worker(60), FAST_WORKERS) as stack:
        browser = Browser(stack.base, user)
        turn = browser.send("tell me a story").json()
        url = turn["assistant_message"]["stream_url"]
        first = stream_read(stack.base, url, browser.cookie, until_tokens=5)
        assert first.final is None and first.last_id
        os.kill(stack.web.process.pid, signal.SIGKILL)
        stack.web.process.popen.wait(timeout=10)
        with web_process(env) as web:
            rest = stream_read(
                web.base, url, browser.cookie, last_event_id=first.last_id
            )
        assert rest.final is not None and rest.final.event == "done", rest.events
        assembled = first.text + rest.text
        answer = _answer(turn)
        assert answer.status == Message.Status.COMPLETE
        assert assembled == answer.content == TEXT
        assert (
            Message.objects.filter(conversation_id=answer.conversation_id).count() == 2
        )
        browser.close()


def test_redis_restarted_mid_answer_loses_nothing_stored_and_the_next_turn_works(
    user, tmp_path, settings
):
    """The stack's Redis (a private server of this test, no persistence) is killed
    and started again while an answer streams. The worker outlives the restart and
    writes back what the empty Redis lost of the answer's stream, under the same entry
    ids (inference/outage.py), so the user resuming with Last-Event-ID receives exactly
    the rest and the answer completes (or, if the worker could not go on, ends with a
    clear ``error`` frame), never a hang; stored: the question and every earlier answer
    unchanged, the answer final (not ``streaming``) holding everything generated, the
    text written before the restart included: nothing stored is lost; new messages get
    at worst a 503 "try again" until the worker reads again (within 0.5 s); the next
    turn, or at worst the user's retry of it (see the known gap below), is answered."""
    with PrivateRedis(tmp_path).running() as redis:
        settings.REDIS_URL = redis.url  # this process (worker checks, the reaper) too
        env = {**FAST_WORKERS, "TEST_REDIS_URL": redis.url}
        with running_processes(_worker(100), env) as stack:
            browser = Browser(stack.base, user)
            first_turn = browser.send("first").json()
            done = stream_read(
                stack.base,
                first_turn["assistant_message"]["stream_url"],
                browser.cookie,
            )
            assert done.final is not None and done.final.event == "done"
            conv = first_turn["conversation"]["id"]
            turn = browser.send("second", conversation_id=conv).json()
            url = turn["assistant_message"]["stream_url"]
            first = stream_read(stack.base, url, browser.cookie, until_tokens=3)
            redis.stop()
            redis.start()
            rest = stream_read(
                stack.base,
                url,
                browser.cookie,
                last_event_id=first.last_id,
                timeout_s=30,
            )
            final, assembled = rest.final, first.text + rest.text
            if final is None:  # the relay lost Redis: the reaper finalises it
                chat.streaming_messages_reap(older_than_s=0)
                rest = stream_read(stack.base, url, browser.cookie, timeout_s=30)
                final, assembled = rest.final, rest.text
            answer = _answer(turn)
            assert final is not None, rest.events
            if final.event == "error":
                assert final.data["message"]
                assert answer.status == Message.Status.ERROR
                assert TEXT.startswith(answer.content)
            else:
                assert answer.status == Message.Status.COMPLETE
                assert answer.content == TEXT
            # Nothing stored is lost: the text the user saw before the restart is in
            # the stored answer, and what the client assembled (resuming after its
            # Last-Event-ID) is exactly the stored answer, nothing twice.
            assert first.text and answer.content.startswith(first.text)
            assert assembled == answer.content
            kept = Message.objects.get(id=first_turn["assistant_message"]["id"])
            assert kept.status == Message.Status.COMPLETE and kept.content == TEXT
            assert Message.objects.filter(conversation_id=conv).count() == 4
            tries: list[str] = []
            finals: list[str] = []
            # Known gap (reported): the first turn after the restart may end with a
            # clear "failed, try again" error (a stale pooled Redis connection of the
            # worker); the user's retry is answered. Up to 3 turns, one must complete.
            for attempt in range(3):
                deadline = time.monotonic() + 20  # the worker reads within 0.5 s
                while True:
                    response = browser.send(f"again {attempt}", conversation_id=conv)
                    tries.append(f"{response.status_code} {response.text[:200]}")
                    if response.status_code == 201:
                        break
                    assert time.monotonic() < deadline, f"no turn accepted: {tries}"
                    time.sleep(0.1)
                # meanwhile the user saw a clear "busy, try again" at worst
                assert all(t.startswith(("201", "503")) for t in tries), tries
                done = stream_read(
                    stack.base,
                    response.json()["assistant_message"]["stream_url"],
                    browser.cookie,
                )
                assert done.final is not None, done.events
                finals.append(done.final.event)
                if done.final.event == "done":
                    break
                assert done.final.data["message"]
            assert finals[-1] == "done", finals
            assert not Message.objects.filter(status=Message.Status.STREAMING).exists()
            browser.close()
