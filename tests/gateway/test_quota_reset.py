"""quota_reset (gateway/quota_reset.py): a user's budget comes back at once, while the
reservations of requests in flight stay charged and settle as usual."""

from __future__ import annotations

import pytest

from chatsite.errors import QuotaExceeded
from gateway import quota, quota_reset
from inference import keys
from inference.connections import redis_sync

NOON = 1_780_000_000.0  # 2026-05-28 20:26:40 UTC
LIMITS = quota.Limits(per_minute=5000, per_day=1000, per_month=3000)


def _used(user_id: int, now: float = NOON) -> list[int]:
    windows = quota.quota_windows(user_id=user_id, limits=LIMITS, now=now)
    return [w.used for w in windows]


def _reserve(user_id: int, job_id: str, tokens: int, now: float = NOON) -> None:
    quota.quota_reserve(
        user_id=user_id, job_id=job_id, tokens=tokens, limits=LIMITS, now=now
    )


def test_reset_restores_the_budget_and_keeps_requests_in_flight_charged():
    _reserve(1, "done", 600)
    quota.quota_settle(user_id=1, job_id="done", tokens=600)
    _reserve(1, "live", 250)
    _reserve(2, "other", 100)  # another user's reservation is not touched
    with pytest.raises(QuotaExceeded):
        _reserve(1, "blocked", 300)
    done = quota_reset.quota_reset(user_id=1, now=NOON)
    assert [(r.name, r.before, r.after) for r in done] == [
        ("minute", 850, 250),
        ("day", 850, 250),
        ("month", 850, 250),
    ]
    assert _used(1) == [250, 250, 250]
    assert _used(2) == [100, 100, 100]
    _reserve(1, "after", 750)  # 250 in flight + 750 = the whole daily limit
    # the request in flight settles normally: the counter ends at its actual usage
    assert quota.quota_settle(user_id=1, job_id="live", tokens=40) == 250
    assert _used(1) == [790, 790, 790]
    assert redis_sync().exists(keys.reservation_key(1, "after"))


def test_a_reservation_from_an_earlier_day_settles_on_its_own_day():
    yesterday = NOON - 86400
    _reserve(1, "old", 400, now=yesterday)
    _reserve(1, "new", 100)
    done = {r.name: r for r in quota_reset.quota_reset(user_id=1, now=NOON)}
    assert (done["day"].before, done["day"].after) == (100, 100)
    # the month (same month) counted both, and still holds both in flight
    assert (done["month"].before, done["month"].after) == (500, 500)
    quota.quota_settle(user_id=1, job_id="old", tokens=400)
    assert _used(1)[1:] == [100, 500]
    assert _used(1, now=yesterday)[1] == 400  # yesterday's counter unchanged


def test_reset_writes_the_counters_so_they_are_not_seeded_again_from_records():
    assert len(quota.quota_unseeded(user_id=3, now=NOON)) == 2
    done = quota_reset.quota_reset(user_id=3, now=NOON)
    assert [r.after for r in done] == [0, 0, 0]
    assert quota.quota_unseeded(user_id=3, now=NOON) == []
    day_key = quota.quota_windows(user_id=3, limits=LIMITS, now=NOON)[1].key
    assert redis_sync().ttl(day_key) > 0  # expires with its window, as reserve does
