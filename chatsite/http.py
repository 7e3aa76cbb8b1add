"""The one place that turns domain errors into HTTP responses (CONVENTIONS §3)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.http.response import HttpResponseBase
from django.shortcuts import render
from django.template import loader

from chatsite.errors import (
    DomainError,
    InvalidInput,
    PayloadTooLarge,
    ServiceUnavailable,
)


def error_response(exc: DomainError) -> JsonResponse:
    """Return ``{"error": {"code", "message"}}`` with the error's status and headers."""
    response = JsonResponse(
        {"error": {"code": exc.code, "message": exc.message}}, status=exc.status
    )
    for name, value in exc.headers.items():
        response[name] = value
    return response


def json_errors(
    view: Callable[..., HttpResponseBase],
) -> Callable[..., HttpResponseBase]:
    """Decorate a sync JSON view so that a raised :class:`DomainError` becomes its response."""

    @functools.wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        try:
            return view(request, *args, **kwargs)
        except DomainError as exc:
            return error_response(exc)

    return wrapper


def bad_request(
    request: HttpRequest, exception: Exception | None = None
) -> HttpResponse:
    """handler400: a request body over DATA_UPLOAD_MAX_MEMORY_SIZE is a clear 413.

    Other bad requests get a plain 400. JSON for the API and for clients that asked
    for JSON (the chat page's fetch calls do; :func:`_json_error`), otherwise a short
    text page.
    """
    from django.core.exceptions import RequestDataTooBig

    error: DomainError
    if isinstance(exception, RequestDataTooBig):
        error = PayloadTooLarge(
            "The request is too large. Messages can be at most "
            f"{settings.CHAT_MAX_MESSAGE_CHARS:,} characters.",
            code="request_too_large",
        )
    else:
        error = InvalidInput("The request could not be understood.", code="bad_request")
    if _wants_json(request):
        return _json_error(error, "invalid_request_error")
    return error_page(request, status=error.status, message=error.message)


def _json_error(error: DomainError, error_type: str) -> JsonResponse:
    """Return ``error`` in OpenAI's shape ``{"error": {"message", "type", "param",
    "code"}}`` (a superset of the chat's ``{"code", "message"}``), with its headers."""
    body = {
        "error": {
            "message": error.message,
            "type": error_type,
            "param": None,
            "code": error.code,
        }
    }
    response = JsonResponse(body, status=error.status)
    for name, value in error.headers.items():
        response[name] = value
    return response


# Failures of a backing service that a retry can fix: PostgreSQL down or restarting
# (psycopg's errors, as Django wraps them, and the pool's timeout), Redis down or
# restarting. Anything else stays a 500.
_UNAVAILABLE_RETRY_AFTER_S = 5


def _unavailable_error(exc: BaseException | None) -> ServiceUnavailable | None:
    """Return the 503 for ``exc`` if it is a backing service's outage, else None."""
    from django.db import InterfaceError, OperationalError
    from redis.exceptions import ConnectionError as RedisConnectionError
    from redis.exceptions import TimeoutError as RedisTimeoutError

    if isinstance(exc, OperationalError | InterfaceError):
        return ServiceUnavailable(
            "The database is not reachable right now. Nothing was lost; "
            "please try again in a few seconds.",
            code="database_unavailable",
            retry_after_s=_UNAVAILABLE_RETRY_AFTER_S,
        )
    if isinstance(exc, RedisConnectionError | RedisTimeoutError):
        return ServiceUnavailable(
            "A backing service (Redis) is not reachable right now. "
            "Please try again in a few seconds.",
            code="redis_unavailable",
            retry_after_s=_UNAVAILABLE_RETRY_AFTER_S,
        )
    return None


def _wants_json(request: HttpRequest) -> bool:
    """Whether to answer ``request`` in JSON: the API, or a client that asked for it."""
    match = getattr(request, "resolver_match", None)
    if match is not None and (match.url_name or "").startswith("api-"):
        return True
    return request.path.startswith("/v1/") or "application/json" in (
        request.headers.get("Accept", "")
    )


# The status codes that have a page of their own (templates/errors/<status>.html);
# any other 4xx/5xx is shown with the 400 or 500 one.
ERROR_PAGES = {400, 403, 404, 405, 429, 500, 503}


def error_page(request: HttpRequest, *, status: int, message: str = "") -> HttpResponse:
    """Render the error page of ``status`` in the site's layout.

    ``message`` replaces the page's default explanation. Statuses without a page of
    their own (ERROR_PAGES) use the 400 page for 4xx and the 500 one otherwise.
    """
    name = status if status in ERROR_PAGES else (400 if status < 500 else 500)
    return render(request, f"errors/{name}.html", {"message": message}, status=status)


def permission_denied(
    request: HttpRequest, exception: Exception | None = None
) -> HttpResponse:
    """handler403: the 403 page (a CSRF failure has its own view, below)."""
    return error_page(request, status=403)


CSRF_MESSAGE = (
    "This form has expired or came from another page, so it was not sent (a security "
    "check). Nothing was saved. Reload the page and try again."
)


def csrf_failure(request: HttpRequest, reason: str = "") -> HttpResponse:
    """CSRF_FAILURE_VIEW: a 403 in the site's layout, or JSON for JSON clients.

    Django's own view shows its debug page whenever DEBUG is on (as under ``make
    run``), which tells a person nothing they can act on; ``reason`` (Django's words
    for developers) is left out for the same reason.
    """
    error = DomainError(CSRF_MESSAGE, code="csrf_failed", status=403)
    if _wants_json(request):
        return _json_error(error, "invalid_request_error")
    return error_page(request, status=403, message=CSRF_MESSAGE)


def method_not_allowed(request: HttpRequest, response: HttpResponse) -> HttpResponse:
    """Give the empty 405 of Django's ``require_http_methods`` a body a person can read.

    The page (or JSON for JSON clients) says which methods the address takes; the
    ``Allow`` header stays. Called by :func:`chatsite.middleware.method_not_allowed_pages`.
    """
    allowed = response.headers.get("Allow", "")
    error = DomainError(
        "This address can't be opened this way "
        f"(it accepts {allowed or 'other methods'}). Go back and use the page's "
        "button or form.",
        code="method_not_allowed",
        status=405,
    )
    page = (
        _json_error(error, "invalid_request_error")
        if _wants_json(request)
        else error_page(request, status=405, message=error.message)
    )
    if allowed:
        page["Allow"] = allowed
    return page


def page_not_found(
    request: HttpRequest, exception: Exception | None = None
) -> HttpResponse:
    """handler404: the 404 page, or a JSON error for JSON clients."""
    if "application/json" in request.headers.get("Accept", ""):
        return JsonResponse(
            {"error": {"code": "not_found", "message": "Not found."}}, status=404
        )
    return error_page(request, status=404)


def server_error(request: HttpRequest) -> HttpResponse:
    """handler500: an outage of PostgreSQL or Redis is a clear 503 with Retry-After;
    any other unhandled error is Django's 500.

    Django calls this inside its ``except`` block (``handle_uncaught_exception``), so
    ``sys.exc_info()`` is the exception, wherever it was raised: a view, a middleware
    (the session or the rate limiter's cache) or the URL resolver. JSON for the API
    and JSON clients: ``{"error": {"message", "type", "param", "code"}}`` (OpenAI's
    shape, a superset of the chat's ``{"code", "message"}``); otherwise a short page
    rendered without the request, so rendering it needs neither the database (no
    session, no messages) nor Redis.
    """
    import sys

    from django.template.loader import render_to_string

    error: DomainError | None = _unavailable_error(sys.exc_info()[1])
    if error is None:
        if _wants_json(request):
            error = DomainError(
                "Something went wrong on our side. Please try again.",
                code="server_error",
                status=500,
            )
        else:
            # the 500 page without the request's context: no context processor runs,
            # so it needs neither the database nor the user (either may have failed)
            return HttpResponse(loader.render_to_string("errors/500.html"), status=500)
    if _wants_json(request):
        return _json_error(error, "server_error")
    html = render_to_string("errors/unavailable.html", {"message": error.message})
    response = HttpResponse(html, status=error.status)
    for name, value in error.headers.items():
        response[name] = value
    return response
