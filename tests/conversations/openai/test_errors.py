"""The API's errors in OpenAI's shape, statuses and headers (chatsite.errors with
``openai=True``): through the views and directly."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from asgiref.sync import sync_to_async
from django.db import connection

from chatsite.errors import InvalidApiKey, QuotaExceeded, error_response
from gateway import services
from gateway.generations.outcome import generation_failed
from gateway.models import ApiKey, UsageRecord
from inference import protocol
from tests.conversations.openai.helpers import asgi, ask, no_reservations
from tests.gateway import factories

pytestmark = pytest.mark.django_db(transaction=True)


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
        result = await asgi(method, path, body=ask(), key=key)
        assert result.status == 401
        error = result.json()["error"]
        assert error["code"] == "invalid_api_key"
        assert error["type"] == "invalid_request_error" and error["message"]


async def test_an_unknown_model_is_a_404_model_not_found(api_key):
    result = await asgi(
        "POST", "/v1/chat/completions", body=ask(model="gpt-9"), key=api_key
    )
    assert result.status == 404
    error = result.json()["error"]
    assert (error["code"], error["param"]) == ("model_not_found", "model")


async def test_over_quota_is_a_429_with_headers_and_nothing_reserved(user, api_key):
    plan = await sync_to_async(factories.plan)(tokens_per_minute=60)
    await sync_to_async(factories.subscribe)(user, plan)
    result = await asgi(
        "POST", "/v1/chat/completions", body=ask(max_tokens=500), key=api_key
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
    assert no_reservations() and await UsageRecord.objects.acount() == 0


async def test_a_pool_without_a_live_worker_is_a_503(api_key):
    result = await asgi("POST", "/v1/chat/completions", body=ask(), key=api_key)
    assert result.status == 503
    assert result.json()["error"]["type"] == "server_error"
    assert "retry-after" in result.headers
    assert no_reservations()


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


# --- the mapper directly ---------------------------------------------------------------


@pytest.mark.parametrize("retryable", [True, False])
def test_a_429_says_x_should_retry_false_exactly_when_it_is_not_retryable(retryable):
    """Read from the structured field: the same message either way."""
    exc = QuotaExceeded("Over the limit.", code="quota_minute", retryable=retryable)
    response = error_response(exc, openai=True)
    assert response.status_code == 429
    assert response.has_header("x-should-retry") is not retryable
    assert json.loads(response.content)["error"] == {
        "message": "Over the limit.",
        "type": "tokens",
        "param": None,
        "code": "quota_minute",
    }


def test_a_401_asks_for_a_bearer_key():
    response = error_response(InvalidApiKey(), openai=True)
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == "Bearer"
    assert json.loads(response.content)["error"]["type"] == "invalid_request_error"


@pytest.mark.parametrize(
    ("code", "status", "retry_after"),
    [
        (protocol.ERROR_QUEUE_TIMEOUT, 503, True),
        (protocol.ERROR_NO_WORKER, 503, True),
        (protocol.ERROR_CONTEXT_OVERFLOW, 400, False),
        (protocol.ERROR_ENGINE, 500, False),
    ],
)
def test_a_failed_generation_maps_its_error_code_to_a_status(
    code, status, retry_after, settings
):
    exc = generation_failed(code=code, message="It failed.")
    response = error_response(exc, openai=True)
    assert (response.status_code, exc.code) == (status, code)
    assert response.has_header("Retry-After") is retry_after
    if retry_after:
        assert response["Retry-After"] == str(settings.GATEWAY_SATURATED_RETRY_AFTER_S)


async def test_a_wrong_method_is_a_405_naming_the_allowed_one(api_key):
    for method, path, allowed in (
        ("GET", "/v1/chat/completions", "POST"),
        ("POST", "/v1/models", "GET"),
    ):
        result = await asgi(method, path, key=api_key)
        assert (result.status, result.headers["allow"]) == (405, allowed)
        assert result.json()["error"]["code"] == "method_not_allowed"
