"""handler500 (chatsite.http.server_error): an outage of PostgreSQL or Redis, wherever
it surfaces, is a clear 503 with Retry-After (a page, or JSON for the API and JSON
clients); any other unhandled error stays a 500. The real outage is drilled in
tests/test_faults_database.py (slow)."""

from __future__ import annotations

import pytest
from django.db import OperationalError
from django.test import Client
from redis.exceptions import ConnectionError as RedisConnectionError

from conversations import views
from gateway import selectors as gateway_selectors
from gateway import services as gateway_services

pytestmark = pytest.mark.django_db


def _raiser(exc: Exception):
    def fail(*args, **kwargs):
        raise exc

    return fail


@pytest.fixture
def client(user) -> Client:
    client = Client(raise_request_exception=False)
    client.force_login(user)
    return client


def test_a_database_outage_on_a_page_is_a_503_page_with_retry_after(
    client, monkeypatch
):
    monkeypatch.setattr(views, "_chat_page", _raiser(OperationalError("down")))
    page = client.get("/")
    assert page.status_code == 503
    assert int(page["Retry-After"]) > 0
    assert page["Content-Type"].startswith("text/html")
    assert "Temporarily unavailable" in page.content.decode()


def test_a_redis_outage_for_a_json_client_is_a_503_json_error(client, monkeypatch):
    monkeypatch.setattr(views, "_chat_page", _raiser(RedisConnectionError("down")))
    response = client.get("/", HTTP_ACCEPT="application/json")
    assert response.status_code == 503 and int(response["Retry-After"]) > 0
    error = response.json()["error"]
    assert error["code"] == "redis_unavailable" and error["message"]


def test_a_database_outage_on_the_api_is_openais_503_error(user, monkeypatch):
    raw = gateway_services.api_key_create(user=user)[1]
    monkeypatch.setattr(
        gateway_selectors, "pool_choices", _raiser(OperationalError("down"))
    )
    response = Client(raise_request_exception=False).get(
        "/v1/models", HTTP_AUTHORIZATION=f"Bearer {raw}"
    )
    assert response.status_code == 503 and int(response["Retry-After"]) > 0
    error = response.json()["error"]
    assert error["code"] == "database_unavailable"
    assert error["type"] == "server_error" and error["message"]


def test_any_other_error_stays_a_500(client, monkeypatch):
    monkeypatch.setattr(views, "_chat_page", _raiser(KeyError("bug")))
    assert client.get("/").status_code == 500
    api = client.get("/", HTTP_ACCEPT="application/json")
    assert api.status_code == 500
    assert api.json()["error"]["code"] == "server_error"
