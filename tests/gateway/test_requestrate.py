"""API requests per minute (gateway/requestrate.py): per user across keys and per
key, from the plan; a 429 with Retry-After and OpenAI's ``x-ratelimit-*-requests``
headers; a refused request counts nowhere."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from django.test import Client

from chatsite.errors import QuotaExceeded
from gateway import quota, requestrate
from gateway import services as gateway_services
from gateway.models import Plan
from inference import keys
from inference.connections import redis_sync

pytestmark = pytest.mark.django_db


def _models(key: str) -> Any:
    return Client().get("/v1/models", HTTP_AUTHORIZATION=f"Bearer {key}")


@pytest.fixture
def plan() -> Plan:
    plan, _ = Plan.objects.update_or_create(
        is_default=True,
        defaults={"requests_per_minute": 5, "key_requests_per_minute": 3},
    )
    return plan


def test_a_new_plan_has_request_limits_by_default():
    plan = Plan.objects.create(name="fresh")
    assert (plan.requests_per_minute, plan.key_requests_per_minute) == (600, 300)


def test_a_key_over_its_requests_per_minute_gets_a_429_with_openais_headers(user, plan):
    key = gateway_services.api_key_create(user=user)[1]
    for _ in range(3):
        assert _models(key).status_code == 200
    refused = _models(key)
    assert refused.status_code == 429, refused.content
    error = refused.json()["error"]
    assert error["code"] == "rate_limit_requests" and error["type"] == "requests"
    assert "this API key may make 3 per minute" in error["message"]
    assert 1 <= int(refused["Retry-After"]) <= 60
    assert refused["x-ratelimit-limit-requests"] == "3"
    assert refused["x-ratelimit-remaining-requests"] == "0"
    assert refused["x-ratelimit-reset-requests"] == f"{refused['Retry-After']}s"


def test_every_counted_response_reports_the_tighter_window(user, plan, monkeypatch):
    """``x-ratelimit-*-requests`` on a 200 too: the window with less room left."""
    monkeypatch.setattr(requestrate, "time", SimpleNamespace(time=lambda: 6_000_015.0))
    first, second = (gateway_services.api_key_create(user=user)[1] for _ in range(2))

    def limits(key: str) -> tuple[str, str, str]:
        response = _models(key)
        assert response.status_code == 200, response.content
        return (
            response["x-ratelimit-limit-requests"],
            response["x-ratelimit-remaining-requests"],
            response["x-ratelimit-reset-requests"],
        )

    # the key (3) is tighter than the user (5) ...
    assert [limits(first) for _ in range(3)] == [
        ("3", "2", "45s"),
        ("3", "1", "45s"),
        ("3", "0", "45s"),
    ]
    # ... until the user has less room than a fresh key
    assert limits(second) == ("5", "1", "45s")


def test_the_users_limit_spans_their_keys(user, plan):
    first, second = (gateway_services.api_key_create(user=user)[1] for _ in range(2))
    for key in (first, first, first, second, second):
        assert _models(key).status_code == 200
    refused = _models(second)  # the key has room (2 of 3), the user has none (5)
    assert refused.status_code == 429
    assert "your account may make 5 per minute" in refused.json()["error"]["message"]


def test_a_refused_request_is_not_counted_and_no_limit_means_none(user):
    counted = requestrate.request_count(
        user_id=user.pk, key_id=1, user_limit=1, key_limit=None, now=120.0
    )
    assert (counted.limit, counted.remaining, counted.reset_s) == (1, 0, 60)
    for _ in range(3):
        with pytest.raises(Exception, match="1 per minute"):
            requestrate.request_count(
                user_id=user.pk, key_id=1, user_limit=1, key_limit=None, now=130.0
            )
    # the next minute starts afresh: the refusals above counted nothing
    assert (
        requestrate.request_count(
            user_id=user.pk, key_id=1, user_limit=1, key_limit=None, now=180.0
        ).remaining
        == 0
    )
    free = requestrate.request_count(
        user_id=user.pk, key_id=1, user_limit=None, key_limit=None
    )
    assert free.headers() == {}


def _counter(user_id: int, **fields: Any) -> requestrate.RequestCounter:
    return requestrate.RequestCounter(
        user_id=user_id,
        key_id=4,
        **{"user_limit": 2, "key_limit": None, "now": 120.0, **fields},
    )


def test_the_reservation_counts_the_request_in_its_own_script(user):
    """quota_reserve(count=...) counts the request with the reservation, atomically:
    over the requests per minute nothing is reserved; a request refused for tokens
    stays counted; a request counted once is not counted again."""
    limits = quota.Limits(per_minute=100)
    first = _counter(user.pk)
    quota.quota_reserve(
        user_id=user.pk, job_id="r1", tokens=10, limits=limits, now=120.0, count=first
    )
    assert first.counted is not None and first.counted.remaining == 1
    quota.quota_reserve(  # already counted: not counted again
        user_id=user.pk, job_id="r1b", tokens=10, limits=limits, now=121.0, count=first
    )
    too_big = _counter(user.pk)
    with pytest.raises(QuotaExceeded) as tokens_refused:
        quota.quota_reserve(
            user_id=user.pk,
            job_id="r2",
            tokens=500,
            limits=limits,
            now=122.0,
            count=too_big,
        )
    assert tokens_refused.value.code == "quota_minute"
    assert too_big.counted is not None and too_big.counted.remaining == 0
    over = _counter(user.pk)
    with pytest.raises(QuotaExceeded) as rate_refused:
        quota.quota_reserve(
            user_id=user.pk,
            job_id="r3",
            tokens=10,
            limits=limits,
            now=123.0,
            count=over,
        )
    assert rate_refused.value.code == requestrate.CODE
    assert "your account may make 2 per minute" in str(rate_refused.value)
    assert over.counted is None
    with pytest.raises(QuotaExceeded) as again:  # the same refusal, not a recount
        over.count()
    assert again.value is rate_refused.value
    client = redis_sync()
    assert not client.exists(keys.reservation_key(user.pk, "r3"))
    assert (
        client.zscore(
            keys.unsubmitted_key("r3"), keys.unsubmitted_member(user.pk, "r3")
        )
        is None
    )
    # tokens: r1 and r1b only (r2 and r3 charged nothing)
    assert quota.quota_windows(user_id=user.pk, limits=limits, now=123.0)[0].used == 20
    # and the count is the one request_count reads: the minute is full
    with pytest.raises(QuotaExceeded, match="2 per minute"):
        _counter(user.pk).count()


def test_a_request_without_limits_is_counted_without_redis(user):
    free = _counter(user.pk, user_limit=None, now=600.0)
    quota.quota_reserve(
        user_id=user.pk,
        job_id="f1",
        tokens=1,
        limits=quota.Limits(),
        now=600.0,
        count=free,
    )
    assert free.counted is not None and free.counted.headers() == {}
    assert not redis_sync().exists(keys.rpm_user_key(user.pk, 10))
