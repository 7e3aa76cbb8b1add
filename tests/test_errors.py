"""The one error renderer (chatsite/errors.py): every DomainError subclass shows the
same code, message, status and headers as the chat's JSON, OpenAI's JSON, the SSE
``error`` frame and the HTML page; and ``wants_json`` picks JSON for the API and for
clients that ask for it."""

from __future__ import annotations

import importlib
import json
from typing import Any

import pytest
from django.contrib.auth.models import AnonymousUser
from django.test import RequestFactory
from django.urls import resolve
from django.utils.html import escape

from chatsite import errors
from chatsite.errors import (
    DomainError,
    QuotaExceeded,
    ServiceUnavailable,
    error_json,
    error_page,
    error_render,
    error_response,
    error_sse,
    wants_json,
)
from conversations.events import sse_validate
from conversations.openai.schemas import validate_error
from inference import protocol

# The modules of the apps' own subclasses, imported so that the parametrisation sees
# them.
for _module in (
    "gateway.embeddings",
    "gateway.generations.admission",
    "gateway.generations.outcome",
    "gateway.routing",
    "safety.classifiers.base",
):
    importlib.import_module(_module)

APPS = ("chatsite.", "conversations.", "gateway.", "memory.", "safety.", "inference.")


def _subclasses(cls: type[DomainError]) -> set[type[DomainError]]:
    found = {cls}
    for sub in cls.__subclasses__():
        found |= _subclasses(sub)
    return found


CLASSES = sorted(
    (c for c in _subclasses(DomainError) if c.__module__.startswith(APPS)),
    key=lambda c: f"{c.__module__}.{c.__qualname__}",
)


def _cases() -> list[Any]:
    """Each class with its own message, and each with a message that needs escaping
    in HTML; plus errors that carry retry fields and headers."""
    cases = [pytest.param(cls(), id=f"{cls.__name__}-default") for cls in CLASSES]
    cases += [
        pytest.param(cls("Can't send <this> & “that”."), id=f"{cls.__name__}-given")
        for cls in CLASSES
    ]
    cases += [
        pytest.param(
            QuotaExceeded(
                "Over the limit.",
                code="quota_minute",
                retry_after_s=30,
                headers={"x-ratelimit-limit-tokens": "60"},
            ),
            id="quota-with-headers",
        ),
        pytest.param(
            ServiceUnavailable("Down for now.", retry_after_s=5), id="unavailable-retry"
        ),
    ]
    return cases


def _sse_data(frame: str) -> tuple[str, str | None, dict[str, Any]]:
    """The (event, id, data) of one SSE frame."""
    assert frame.endswith("\n\n")
    fields = dict(line.split(": ", 1) for line in frame.strip("\n").split("\n"))
    return fields["event"], fields.get("id"), json.loads(fields["data"])


@pytest.fixture
def page_request():
    request = RequestFactory().get("/somewhere/")
    request.user = AnonymousUser()
    return request


def test_every_domain_error_class_is_covered():
    names = {cls.__name__ for cls in CLASSES}
    assert {"DomainError", "NotFound", "ModerationBlocked", "InvalidApiKey"} <= names
    assert {"GenerationFailed", "ModerationUnavailable", "WrongModelKind"} <= names


@pytest.mark.parametrize("exc", _cases())
def test_an_error_renders_alike_in_the_four_shapes(exc: DomainError, page_request):
    chat = error_response(exc)
    openai = error_response(exc, openai=True)
    event, event_id, data = _sse_data(error_sse(exc, event_id="7-0", message_id="m1"))
    page = error_page(page_request, exc)

    assert json.loads(chat.content) == {
        "error": {"code": exc.code, "message": exc.message}
    }
    body = json.loads(openai.content)
    validate_error(body)
    assert (body["error"]["code"], body["error"]["message"]) == (exc.code, exc.message)
    assert body["error"]["param"] == getattr(exc, "param", None)
    assert (event, event_id) == (protocol.EVENT_ERROR, "7-0")
    sse_validate("error", data)
    assert data == {
        "code": exc.code,
        "message": exc.message,
        "message_id": "m1",
        "retryable": exc.retryable,
        "retry_after_s": exc.retry_after_s,
    }
    assert escape(exc.message) in page.content.decode()
    assert page["Content-Type"].startswith("text/html")

    for response in (chat, openai, page):
        assert response.status_code == exc.status
        for name, value in exc.headers.items():
            assert response[name] == value
    if exc.retry_after_s is not None:
        assert chat["Retry-After"] == str(exc.retry_after_s)


def test_the_bodies_are_the_same_as_error_json():
    exc = QuotaExceeded("Over.", code="quota_minute", retryable=False)
    assert json.loads(error_response(exc).content) == error_json(exc)
    assert json.loads(error_response(exc, openai=True).content) == error_json(
        exc, openai=True
    )


@pytest.mark.parametrize(
    ("exc", "kind"),
    [
        (errors.InvalidInput("x"), "invalid_request_error"),
        (errors.PayloadTooLarge("x"), "invalid_request_error"),
        (errors.InvalidApiKey(), "invalid_request_error"),
        (errors.Forbidden("x"), "permission_error"),
        (errors.NotFound(), "invalid_request_error"),
        (errors.MethodNotAllowed("x"), "invalid_request_error"),
        (QuotaExceeded("x", code="quota_minute"), "tokens"),
        (QuotaExceeded("x"), "insufficient_quota"),
        (ServiceUnavailable("x"), "server_error"),
        (DomainError("x", status=500), "server_error"),
    ],
)
def test_openais_type_follows_the_status(exc, kind):
    assert error_json(exc, openai=True)["error"]["type"] == kind


def test_only_openais_shape_adds_the_headers_its_clients_read():
    over = QuotaExceeded("Alone over the limit.", retryable=False)
    assert error_response(over, openai=True)["x-should-retry"] == "false"
    assert not error_response(over).has_header("x-should-retry")
    key = errors.InvalidApiKey()
    assert error_response(key, openai=True)["WWW-Authenticate"] == "Bearer"
    assert not error_response(key).has_header("WWW-Authenticate")


def test_a_failed_answers_error_frame_carries_the_stored_answer():
    stored = {"message_id": "m1", "status": "error", "error": "It failed."}
    failed = DomainError("It failed.", code="generation_failed", retryable=True)
    _event, event_id, data = _sse_data(error_sse(failed, **stored))
    assert event_id is None
    assert data == {
        **stored,
        "code": "generation_failed",
        "message": "It failed.",
        "retryable": True,
        "retry_after_s": None,
    }


@pytest.mark.parametrize("status", [400, 403, 404, 405, 429, 500, 503, 409, 413, 502])
def test_every_status_has_a_page_with_or_without_the_request(page_request, status):
    exc = DomainError("Explained here.", status=status)
    for request in (page_request, None):
        page = error_page(request, exc)
        assert page.status_code == status
        assert "Explained here." in page.content.decode()


def test_the_sse_event_is_the_protocols():
    assert errors.SSE_ERROR == protocol.EVENT_ERROR


# --- wants_json ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "headers", "expected"),
    [
        ("/v1/chat/completions", {}, True),
        ("/v1/no-such-endpoint", {}, True),
        ("/", {"Accept": "application/json"}, True),
        ("/c/messages/", {"Accept": "text/event-stream, application/json"}, True),
        ("/", {"Accept": "text/html,application/xhtml+xml,*/*;q=0.8"}, False),
        ("/", {"Accept": "*/*"}, False),
        ("/", {}, False),
        ("/", {"X-Requested-With": "XMLHttpRequest"}, False),
        ("/documents/", {"Accept": "text/html"}, False),
    ],
)
def test_wants_json_for_the_api_and_for_clients_that_ask(path, headers, expected):
    request = RequestFactory().get(path, headers=headers)
    assert wants_json(request) is expected


def test_wants_json_for_a_request_resolved_to_an_api_view():
    request = RequestFactory().get("/somewhere-else/")
    request.resolver_match = resolve("/v1/models")
    assert request.resolver_match.url_name.startswith("api-")
    assert wants_json(request)


def test_error_render_picks_openais_json_or_the_page(page_request):
    exc = errors.Forbidden("Not yours.", code="csrf_failed")
    as_json = RequestFactory().get("/", headers={"Accept": "application/json"})
    response = error_render(as_json, exc)
    assert response.status_code == 403
    assert json.loads(response.content) == error_json(exc, openai=True)
    page = error_render(page_request, exc)
    assert page.status_code == 403 and "Not yours." in page.content.decode()
