"""Token quotas (gateway/quota.py): atomic reservation, settlement, and the chat turn's
hooks, against real Redis and PostgreSQL, with real threads racing."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection
from django.urls import reverse

from chatsite.errors import PoolSaturated, QuotaExceeded
from conversations import services as chat
from conversations.models import Conversation, Message
from gateway import quota, quota_sweep, selectors
from gateway.models import UsageRecord
from inference import client as inference_client
from inference import keys
from inference.connections import redis_sync
from inference.engines.scripted import ScriptedEngine
from tests.conftest import fake_heartbeat, fake_heartbeat_stop, make_user
from tests.gateway import factories

pytestmark = pytest.mark.django_db(transaction=True)

NOON = 1_780_000_000.0  # 2026-05-28 20:26:40 UTC


def test_reserve_charges_every_window_and_settle_refunds_the_rest():
    limits = quota.Limits(per_minute=1000, per_day=5000, per_month=9000)
    windows = quota.quota_reserve(
        user_id=7, job_id="j1", tokens=300, limits=limits, now=NOON
    )
    assert [w.used for w in windows] == [300, 300, 300]
    assert quota.quota_settle(user_id=7, job_id="j1", tokens=120) == 300
    after = quota.quota_windows(user_id=7, limits=limits, now=NOON)
    assert [w.used for w in after] == [120, 120, 120]
    assert [w.remaining for w in after] == [880, 4880, 8880]


def test_settle_is_idempotent_and_release_gives_everything_back():
    limits = quota.Limits(per_day=1000)
    quota.quota_reserve(user_id=1, job_id="a", tokens=400, limits=limits, now=NOON)
    quota.quota_reserve(user_id=1, job_id="b", tokens=100, limits=limits, now=NOON)
    assert quota.quota_settle(user_id=1, job_id="a", tokens=50) == 400
    assert (
        quota.quota_settle(user_id=1, job_id="a", tokens=50) is None
    )  # second settle: no-op
    assert quota.quota_release(user_id=1, job_id="b") == 100
    assert quota.quota_release(user_id=1, job_id="b") is None
    assert quota.quota_windows(user_id=1, limits=limits, now=NOON)[1].used == 50


def test_over_the_limit_is_a_429_naming_the_window_with_rate_limit_headers():
    limits = quota.Limits(per_minute=100, per_day=10_000)
    quota.quota_reserve(user_id=3, job_id="x", tokens=80, limits=limits, now=NOON)
    with pytest.raises(QuotaExceeded) as info:
        quota.quota_reserve(user_id=3, job_id="y", tokens=30, limits=limits, now=NOON)
    exc = info.value
    assert exc.status == 429 and exc.code == "quota_minute"
    assert "per-minute token limit" in exc.message and "resets in" in exc.message
    # NOON is 40 s into its minute: the window resets 20 s later
    assert exc.headers == {
        "Retry-After": "20",
        "x-ratelimit-limit-tokens": "100",
        "x-ratelimit-remaining-tokens": "20",
        "x-ratelimit-reset-tokens": "20s",
    }
    # nothing was charged for the rejected request, nothing reserved for it
    assert quota.quota_windows(user_id=3, limits=limits, now=NOON)[0].used == 80
    assert not redis_sync().exists(keys.reservation_key(3, "y"))


def test_a_request_larger_than_the_limit_says_so():
    limits = quota.Limits(per_month=50)
    with pytest.raises(QuotaExceeded) as info:
        quota.quota_reserve(user_id=4, job_id="z", tokens=64, limits=limits, now=NOON)
    assert "more than your plan's monthly token budget of 50" in info.value.message


def test_the_minute_window_rolls_over():
    limits = quota.Limits(per_minute=100)
    quota.quota_reserve(user_id=5, job_id="m1", tokens=100, limits=limits, now=NOON)
    with pytest.raises(QuotaExceeded):
        quota.quota_reserve(user_id=5, job_id="m2", tokens=1, limits=limits, now=NOON)
    quota.quota_reserve(
        user_id=5, job_id="m3", tokens=100, limits=limits, now=NOON + 20
    )


# --- the sweep of reservations whose job was never submitted -------------------------


def _unsubmitted() -> int:
    return sum(redis_sync().zcard(key) for key in keys.unsubmitted_keys())


def _used(user_id: int) -> list[int]:
    return [
        w.used
        for w in quota.quota_windows(user_id=user_id, limits=quota.Limits(), now=NOON)
    ]


def test_an_unsubmitted_reservation_is_released_once_older_than_the_timeout():
    limits = quota.Limits(per_day=10_000)
    quota.quota_reserve(user_id=21, job_id="kept", tokens=40, limits=limits, now=NOON)
    quota.quota_reservation_submitted(user_id=21, job_id="kept")
    before = _used(21)
    quota.quota_reserve(user_id=21, job_id="lost", tokens=300, limits=limits, now=NOON)
    assert _used(21) == [b + 300 for b in before]

    # not yet older than the timeout: still charged
    assert quota_sweep.quota_reservations_sweep(older_than_s=60, now=NOON + 59) == 0
    assert _used(21) == [b + 300 for b in before]
    assert redis_sync().exists(keys.reservation_key(21, "lost"))

    assert quota_sweep.quota_reservations_sweep(older_than_s=60, now=NOON + 61) == 1
    assert _used(21) == before
    assert not redis_sync().exists(keys.reservation_key(21, "lost"))
    assert not redis_sync().zscore(
        keys.unsubmitted_key("lost"), keys.unsubmitted_member(21, "lost")
    )


def test_a_submitted_reservation_is_never_swept_and_settles_normally():
    limits = quota.Limits(per_day=10_000)
    quota.quota_reserve(user_id=22, job_id="sent", tokens=300, limits=limits, now=NOON)
    quota.quota_reservation_submitted(user_id=22, job_id="sent")
    assert quota_sweep.quota_reservations_sweep(older_than_s=60, now=NOON + 86_400) == 0
    assert _used(22) == [300, 300, 300]
    assert quota.quota_settle(user_id=22, job_id="sent", tokens=120) == 300
    assert _used(22) == [120, 120, 120]


def test_sweeping_twice_releases_once_and_a_later_settle_changes_nothing():
    limits = quota.Limits(per_day=10_000)
    quota.quota_reserve(user_id=23, job_id="a", tokens=100, limits=limits, now=NOON)
    quota.quota_reserve(user_id=23, job_id="b", tokens=50, limits=limits, now=NOON)
    quota.quota_settle(
        user_id=23, job_id="b", tokens=50
    )  # settled before submission: used 50
    assert quota_sweep.quota_reservations_sweep(older_than_s=60, now=NOON + 120) == 1
    assert quota_sweep.quota_reservations_sweep(older_than_s=60, now=NOON + 180) == 0
    assert _used(23) == [50, 50, 50]
    # the web process was only slow: its settlement comes after the sweep
    assert quota.quota_settle(user_id=23, job_id="a", tokens=80) is None
    assert quota.quota_release(user_id=23, job_id="a") is None
    assert _used(23) == [50, 50, 50]
    assert _unsubmitted() == 0


def test_an_entry_whose_reservation_expired_is_only_removed():
    limits = quota.Limits(per_day=10_000)
    quota.quota_reserve(user_id=24, job_id="old", tokens=100, limits=limits, now=NOON)
    redis_sync().delete(keys.reservation_key(24, "old"))  # as its 40-day TTL would
    assert quota_sweep.quota_reservations_sweep(older_than_s=60, now=NOON + 120) == 0
    assert _unsubmitted() == 0
    assert _used(24) == [100, 100, 100]


def test_the_sweep_task_uses_the_submit_timeout(settings):
    from gateway import tasks

    settings.GATEWAY_RESERVATION_SUBMIT_TIMEOUT_S = 60
    limits = quota.Limits(per_day=10_000)
    now = time.time()
    quota.quota_reserve(user_id=25, job_id="t1", tokens=10, limits=limits, now=now - 61)
    quota.quota_reserve(user_id=25, job_id="t2", tokens=10, limits=limits, now=now - 30)
    assert tasks.sweep_quota_reservations() == 1
    assert not redis_sync().exists(keys.reservation_key(25, "t1"))
    assert redis_sync().exists(keys.reservation_key(25, "t2"))
    assert "gateway.tasks.sweep_quota_reservations" in {
        entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values()
    }


# --- the chat turn: reserve before storing, settle once on the terminal event ---------


def _tiny_budget_user(settings, *, budget: int = 100):
    settings.CHAT_SYSTEM_PROMPT = "Be brief."
    pool = factories.pool("default", model="scripted-1")
    tiny = factories.plan("tiny", pools=[pool], monthly_token_budget=budget)
    user = make_user("racer")
    factories.subscribe(user, tiny)
    return user, tiny


def _race(user, n: int, *, max_tokens: int = 64):
    """Start ``n`` turns at once from ``n`` threads; return (turns, errors)."""
    barrier = threading.Barrier(n)
    turns, errors = [], []
    lock = threading.Lock()

    def one(i: int) -> None:
        try:
            barrier.wait(timeout=30)
            turn = chat.turn_start(
                user=user, content=f"hi {i}", params={"max_tokens": max_tokens}
            )
            with lock:
                turns.append(turn)
        except Exception as exc:  # noqa: BLE001 - collected and asserted
            with lock:
                errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    return turns, errors


def _finalize(job_id: str, timeout: float = 30.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        message = chat.message_finalize(message_id=job_id)
        if message is not None:
            return message
        time.sleep(0.02)
    raise AssertionError(f"{job_id} did not finish")


@pytest.mark.parametrize("concurrent", [8, 50])
def test_concurrent_requests_never_spend_past_the_budget(
    settings, start_worker, concurrent
):
    user, _tiny = _tiny_budget_user(settings, budget=100)
    fake_heartbeat()  # admitted now; the real worker starts after the race
    turns, errors = _race(user, concurrent, max_tokens=64)
    assert len(turns) == 1, errors
    assert len(errors) == concurrent - 1
    assert all(isinstance(e, QuotaExceeded) for e in errors), errors
    assert all(e.status == 429 and "monthly token budget" in e.message for e in errors)
    assert all(e.headers["x-ratelimit-limit-tokens"] == "100" for e in errors)
    assert all(int(e.headers["Retry-After"]) > 0 for e in errors)
    # a rejected request stored nothing and queued nothing
    assert Conversation.objects.count() == 1
    assert Message.objects.filter(role=Message.Role.ASSISTANT).count() == 1
    assert redis_sync().xlen(keys.queue_key("default")) == 1

    fake_heartbeat_stop()
    start_worker(ScriptedEngine(text="Fine thanks"))
    answer = _finalize(turns[0].assistant_message.job_id)
    assert answer.status == Message.Status.COMPLETE
    record = UsageRecord.objects.get()
    assert record.user == user and record.job_id == answer.job_id
    assert record.completion_tokens == 2 and record.prompt_tokens > 0
    assert record.total_tokens <= 100
    month = quota.quota_windows(user_id=user.pk, limits=quota.Limits(per_month=100))[2]
    assert month.used == record.total_tokens  # settled to the actual usage


def test_a_failed_request_consumes_nothing_and_is_recorded_once(settings, start_worker):
    user, tiny = _tiny_budget_user(settings, budget=1000)
    start_worker(ScriptedEngine(text="never", fail_after=0))
    turn = chat.turn_start(user=user, content="hi", params={"max_tokens": 64})
    windows = quota.quota_windows(
        user_id=user.pk, limits=selectors.plan_limits(plan=tiny)
    )
    assert windows[2].used > 64  # reserved while it runs
    answer = _finalize(turn.assistant_message.job_id)
    assert answer.status == Message.Status.ERROR
    record = UsageRecord.objects.get()
    assert (record.status, record.total_tokens, record.cost) == ("error", 0, 0)
    windows = quota.quota_windows(
        user_id=user.pk, limits=selectors.plan_limits(plan=tiny)
    )
    assert [w.used for w in windows] == [0, 0, 0]


def test_relay_and_reaper_finalising_together_settle_exactly_once(
    settings, start_worker
):
    user, tiny = _tiny_budget_user(settings, budget=1000)
    start_worker(ScriptedEngine(text="one two three"))
    turn = chat.turn_start(user=user, content="hi", params={"max_tokens": 64})
    job_id = turn.assistant_message.job_id
    deadline = time.time() + 30
    while not (
        (events := inference_client.generation_events(job_id=job_id))
        and events[-1].is_terminal
    ):
        assert time.time() < deadline
        time.sleep(0.02)
    results = []

    def finalise() -> None:
        try:
            results.append(chat.message_finalize(message_id=job_id))
        finally:
            connection.close()

    threads = [threading.Thread(target=finalise) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    chat.streaming_messages_reap(older_than_s=0)
    assert sum(r is not None for r in results) == 1
    record = UsageRecord.objects.get()
    assert record.completion_tokens == 3
    month = quota.quota_windows(
        user_id=user.pk, limits=selectors.plan_limits(plan=tiny)
    )[2]
    assert month.used == record.total_tokens  # refunded once, not twice


def test_a_saturated_gateway_gives_the_reservation_back_and_stores_nothing(settings):
    user, tiny = _tiny_budget_user(settings, budget=1000)  # no worker: saturated
    with pytest.raises(PoolSaturated):
        chat.turn_start(user=user, content="hi", params={"max_tokens": 64})
    assert Message.objects.count() == 0
    windows = quota.quota_windows(
        user_id=user.pk, limits=selectors.plan_limits(plan=tiny)
    )
    assert [w.used for w in windows] == [0, 0, 0]


def test_the_message_post_answers_429_with_headers_and_stores_nothing(settings, client):
    user, _tiny = _tiny_budget_user(settings, budget=50)
    fake_heartbeat()
    client.force_login(user)
    response = client.post(reverse("message-send-new"), {"content": "hello"})
    assert response.status_code == 429
    body = response.json()["error"]
    assert body["code"] == "quota_month"
    assert "monthly token budget" in body["message"]
    assert response["x-ratelimit-limit-tokens"] == "50"
    assert response["x-ratelimit-remaining-tokens"] == "50"
    assert response["x-ratelimit-reset-tokens"]
    assert int(response["Retry-After"]) > 0
    assert Message.objects.count() == 0 and Conversation.objects.count() == 0


def test_regenerate_reserves_too(settings, client):
    user, _tiny = _tiny_budget_user(settings, budget=200)
    settings.CHAT_MAX_TOKENS = 64
    fake_heartbeat()
    turn = chat.turn_start(user=user, content="hi", params={"max_tokens": 64})
    Message.objects.filter(id=turn.assistant_message.id).update(
        status=Message.Status.COMPLETE, content="hello"
    )
    client.force_login(user)
    url = reverse("message-regenerate", args=[turn.conversation.id])
    ok = client.post(url)
    assert ok.status_code == 201, ok.json()  # 2 x ~80 reserved of 200
    Message.objects.filter(id=ok.json()["assistant_message"]["id"]).update(
        status=Message.Status.COMPLETE, content="hi again"
    )
    refused = client.post(url)
    assert refused.status_code == 429
    assert Message.objects.filter(role=Message.Role.ASSISTANT).count() == 2


def test_the_chat_page_shows_the_tokens_left(settings, client):
    user, _tiny = _tiny_budget_user(settings, budget=1000)
    fake_heartbeat()
    chat.turn_start(user=user, content="hi", params={"max_tokens": 64})
    client.force_login(user)
    page = client.get(reverse("chat-home")).content.decode()
    lines = selectors.quota_status(user=user)
    assert len(lines) == 1 and lines[0].remaining < 1000
    left = lines[0].remaining  # as <data> that static/site.js formats for the locale
    assert "Tokens left" in page
    assert f'<data class="num" value="{left}">{left}</data> this month' in page


def test_budgets_survive_a_redis_restart_through_the_usage_records(settings):
    user, tiny = _tiny_budget_user(settings, budget=1000)
    fake_heartbeat()
    UsageRecord.objects.create(
        user=user,
        job_id="earlier",
        prompt_tokens=600,
        completion_tokens=300,
        status="complete",
    )
    with pytest.raises(QuotaExceeded) as info:  # 900 spent + 214 > 1000
        chat.turn_start(user=user, content="hi", params={"max_tokens": 200})
    assert info.value.headers["x-ratelimit-remaining-tokens"] == "100"
    chat.turn_start(user=user, content="hi", params={"max_tokens": 64})
    windows = quota.quota_windows(
        user_id=user.pk, limits=selectors.plan_limits(plan=tiny)
    )
    assert windows[1].used > 900 and windows[2].used > 900


def test_a_failure_after_admission_gives_the_reservation_back():
    from gateway import generations

    limits = quota.Limits(per_day=1000)
    with (
        pytest.raises(RuntimeError),
        generations.reservation_guard(user_id=9, job_id="g1"),
    ):
        quota.quota_reserve(user_id=9, job_id="g1", tokens=300, limits=limits)
        raise RuntimeError("the database went away")
    assert quota.quota_windows(user_id=9, limits=limits)[1].used == 0


def test_reserve_seeds_absent_day_and_month_counters_before_charging():
    limits = quota.Limits(per_day=1000, per_month=5000)
    seeded = []

    def seed(windows):
        seeded.append([w.name for w in windows])
        for window in windows:
            quota.quota_seed(window=window, tokens=700, now=NOON)

    with pytest.raises(QuotaExceeded):  # 700 already spent today + 400 > 1000
        quota.quota_reserve(
            user_id=5, job_id="s1", tokens=400, limits=limits, now=NOON, seed=seed
        )
    assert seeded == [["day", "month"]]
    windows = quota.quota_reserve(
        user_id=5, job_id="s2", tokens=200, limits=limits, now=NOON, seed=seed
    )
    assert seeded == [["day", "month"]]  # present now: not seeded again
    assert [w.used for w in windows] == [200, 900, 900]
