"""The failover drill on a Redis Cluster: the master that holds an answer's stream is
killed while the answer streams (the stack as deployed: uvicorn and a scripted worker
as processes, tests/stack.py, every Redis client on the cluster)."""

from __future__ import annotations

import time

import pytest

from conversations.models import Message
from gateway import quota
from gateway.models import UsageRecord
from inference.connections import redis_sync
from tests.faults import Browser, stream_read
from tests.stack import running_processes
from tests.test_faults import FAST_WORKERS, TEXT, _answer, _worker

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.cluster,
    # One retry (pytest-rerunfailures), as the browser tests have: a whole stack and
    # a cluster on two cores. It had two while the first try failed in three of four
    # runs: the web's sync cluster pipelines asked the killed master for their
    # scripts' keys, for good (chatsite/redis_cluster.py, ScriptKeysParser;
    # bench/results/2026-12-05-testtime2.md).
    pytest.mark.flaky(reruns=1),
]


def _stream_key(job_id: str) -> str:
    """The generation stream of ``job_id`` (the only stream key naming the job)."""
    found = list(redis_sync().scan_iter(match=f"*{job_id}*", _type="stream"))
    assert len(found) == 1, found
    return found[0]


def test_a_master_killed_mid_answer_fails_over_and_nothing_is_lost(user, on_cluster):
    """SIGKILL of the master that serves the slot of an answer's stream, mid-answer.
    Its replica takes over (the drill waits on cluster_state:ok, not a sleep). The
    user resuming with Last-Event-ID (again after a retryable ``stream_interrupted``,
    as the page does) gets the rest and a ``done``, or a clear ``error``, never a
    hang; stored: the question and the earlier answer
    unchanged, the answer final (never ``streaming``) holding what the user saw;
    billed once (one UsageRecord per answer, the quota's windows equal to what the
    records say); the next turn is answered."""
    with running_processes(_worker(80), FAST_WORKERS) as stack:
        browser = Browser(stack.base, user)
        first_turn = browser.send("first").json()
        done = stream_read(
            stack.base, first_turn["assistant_message"]["stream_url"], browser.cookie
        )
        assert done.final is not None and done.final.event == "done", done.events
        conv = first_turn["conversation"]["id"]
        turn = browser.send("second", conversation_id=conv).json()
        url = turn["assistant_message"]["stream_url"]
        first = stream_read(stack.base, url, browser.cookie, until_tokens=3)
        assert first.final is None and first.last_id
        victim = on_cluster.master_of(_stream_key(_answer(turn).job_id))
        promoted = on_cluster.kill_master(victim)
        assert promoted in on_cluster.masters()
        # The page follows the answer again on a retryable "stream_interrupted" (the
        # relay lost Redis for a moment), from its last entry id, up to 5 times, 1 s
        # apart (static/chat.js): as the page does, so does the drill.
        reads, last_id = [first], first.last_id
        for _attempt in range(5):
            rest = stream_read(
                stack.base, url, browser.cookie, last_event_id=last_id, timeout_s=60
            )
            reads.append(rest)
            assert rest.final is not None, rest.events
            ids = [e.id for e in rest.events if e.id and e.event != "error"]
            last_id = ids[-1] if ids else last_id
            if rest.final.data.get("code") != "stream_interrupted":
                break
            assert rest.final.data["retryable"] and rest.final.data["message"]
            time.sleep(rest.final.data.get("retry_after_s", 1))
        final = reads[-1].final
        assert final is not None
        answer = _answer(turn)
        if final.event == "error":
            assert final.data["message"]
            if answer.status != Message.Status.ERROR:  # which side lost the end
                for proc in [stack.web.process, *stack.workers]:
                    print(f"--- stderr of {proc.what} ---\n{proc.stderr_tail(12000)}")
            assert answer.status == Message.Status.ERROR, final.data
            assert TEXT.startswith(answer.content)
        else:
            assert answer.status == Message.Status.COMPLETE
            assert answer.content == TEXT
        # nothing stored is lost: what the user saw is in the stored answer, and the
        # resumed streams carried exactly the rest
        assert first.text and answer.content.startswith(first.text)
        assert "".join(r.text for r in reads) == answer.content
        kept = Message.objects.get(id=first_turn["assistant_message"]["id"])
        assert kept.status == Message.Status.COMPLETE and kept.content == TEXT
        # billed once per answer, and the quota counts exactly what was billed
        records = list(UsageRecord.objects.filter(user=user))
        assert sorted(r.job_id for r in records) == sorted({kept.job_id, answer.job_id})
        limits = quota.Limits(per_day=10**6, per_month=10**6)
        windows = quota.quota_windows(user_id=user.pk, limits=limits)
        spent = sum(r.total_tokens for r in records)
        assert [w.used for w in windows[1:]] == [spent, spent]
        # the next turn works (a busy 503 "try again" at worst while clients reconnect)
        deadline = time.monotonic() + 30
        tries: list[str] = []
        while True:
            response = browser.send("third", conversation_id=conv)
            tries.append(f"{response.status_code} {response.text[:200]}")
            if response.status_code == 201:
                break
            why = (tries, stack.workers[0].stderr_tail())
            assert response.status_code == 503 and time.monotonic() < deadline, why
            time.sleep(1)
        done = stream_read(
            stack.base,
            response.json()["assistant_message"]["stream_url"],
            browser.cookie,
        )
        assert done.final is not None and done.final.event == "done", done.events
        assert not Message.objects.filter(status=Message.Status.STREAMING).exists()
        browser.close()
