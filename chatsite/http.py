"""Django's error handlers and the JSON views' decorator: each turns what went wrong
into a :class:`~chatsite.errors.DomainError` and renders it through
:mod:`chatsite.errors` (JSON for JSON clients, the site's page otherwise).

Wired in ``chatsite/urls.py`` (handler400/403/404/500), as ``CSRF_FAILURE_VIEW`` and
by :func:`chatsite.middleware.method_not_allowed_pages` (the 405 page).
"""

from __future__ import annotations

import functools
import sys
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.http.response import HttpResponseBase
from django.urls import get_script_prefix, get_urlconf, reverse

from chatsite.errors import (
    DomainError,
    Forbidden,
    InvalidInput,
    MethodNotAllowed,
    PageNotFound,
    PayloadTooLarge,
    ServiceUnavailable,
    error_page,
    error_render,
    error_response,
    wants_json,
)


def json_errors(
    view: Callable[..., HttpResponseBase],
) -> Callable[..., HttpResponseBase]:
    """Decorate a sync JSON view so that a raised :class:`DomainError` becomes its
    response (:func:`chatsite.errors.error_response`, the chat's shape)."""

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
    """handler400: a request body over DATA_UPLOAD_MAX_MEMORY_SIZE is a clear 413;
    other bad requests a plain 400 (:func:`chatsite.errors.error_render`)."""
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
    return error_render(request, error)


# Failures of a backing service that a retry can fix: PostgreSQL down or restarting
# (psycopg's errors, as Django wraps them, and the pool's timeout), Redis down or
# restarting. Anything else stays a 500.
_UNAVAILABLE_RETRY_AFTER_S = 5

SERVER_ERROR_MESSAGE = (
    "Something broke on our side. It has been logged; please try again in a moment."
)


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


def permission_denied(
    request: HttpRequest, exception: Exception | None = None
) -> HttpResponse:
    """handler403: a 403 (a CSRF failure has its own view, below)."""
    return error_render(request, Forbidden("You do not have access to this page."))


CSRF_MESSAGE = (
    "This form has expired or came from another page, so it was not sent (a security "
    "check). Nothing was saved. Reload the page and try again."
)


def csrf_failure(request: HttpRequest, reason: str = "") -> HttpResponse:
    """CSRF_FAILURE_VIEW: a 403 ``csrf_failed`` in the site's layout, or JSON for
    JSON clients.

    Django's own view shows its debug page whenever DEBUG is on (as under ``make
    run``), which tells a person nothing they can act on; ``reason`` (Django's words
    for developers) is left out for the same reason.
    """
    return error_render(request, Forbidden(CSRF_MESSAGE, code="csrf_failed"))


def method_not_allowed(request: HttpRequest, response: HttpResponse) -> HttpResponse:
    """Give the empty 405 of Django's ``require_http_methods`` a body a person can read.

    The page (or JSON for JSON clients) says which methods the address takes; the
    ``Allow`` header of ``response`` stays. Called by
    :func:`chatsite.middleware.method_not_allowed_pages`.
    """
    allowed = response.headers.get("Allow", "")
    error = MethodNotAllowed(
        "This address can't be opened this way "
        f"(it accepts {allowed or 'other methods'}). Go back and use the page's "
        "button or form.",
        headers={"Allow": allowed} if allowed else None,
    )
    return error_render(request, error)


def page_not_found(
    request: HttpRequest, exception: Exception | None = None
) -> HttpResponse:
    """handler404: the 404 page, or a JSON error for the API and JSON clients."""
    return error_render(request, PageNotFound())


def server_error(request: HttpRequest) -> HttpResponse:
    """handler500: an outage of PostgreSQL or Redis is a clear 503 with Retry-After;
    any other unhandled error is a 500.

    Django calls this inside its ``except`` block (``handle_uncaught_exception``), so
    ``sys.exc_info()`` is the exception, wherever it was raised: a view, a middleware
    (the session or the rate limiter's cache) or the URL resolver. JSON (OpenAI's
    shape) for the API and JSON clients; otherwise the page rendered without the
    request, so rendering it needs neither the database (no session, no messages) nor
    Redis.
    """
    error = _unavailable_error(sys.exc_info()[1]) or DomainError(
        SERVER_ERROR_MESSAGE, code="server_error", status=500
    )
    if wants_json(request):
        return error_response(error, openai=True)
    return error_page(None, error)


# stand-ins for a URL's UUID arguments, reversed once to find where each one goes
_ID_MARKS = tuple(uuid.UUID(int=i + 1) for i in range(4))
_url_templates: dict[tuple[str, int, str, str], str] = {}


def _url_template(name: str, count: int, prefix: str, urlconf: str) -> str:
    """The format string of URL ``name`` with ``count`` UUID arguments under
    ``prefix`` and ``urlconf``, reversed once per key."""
    key = (name, count, prefix, urlconf)
    template = _url_templates.get(key)
    if template is None:
        marks = _ID_MARKS[:count]
        url = reverse(name, args=marks)
        template = url.replace("{", "{{").replace("}", "}}")
        for index, mark in enumerate(marks):
            template = template.replace(str(mark), "{" + str(index) + "}")
        _url_templates[key] = template
    return template


def _id_text(value: uuid.UUID | str) -> str:
    return str(value if isinstance(value, uuid.UUID) else uuid.UUID(value))


def uuid_url(name: str, *ids: uuid.UUID | str) -> str:
    """``reverse(name, args=ids)`` for a URL pattern whose arguments are all UUIDs
    (``<uuid:...>``, at most four), filled into a template reversed once per name,
    URLconf and script prefix: no resolver walk per call. A str id is checked to be a
    UUID first (ValueError otherwise); raises NoReverseMatch as ``reverse`` does."""
    return uuid_urls([(name, ids)])[0]


def uuid_urls(
    specs: Sequence[tuple[str, Sequence[uuid.UUID | str]]],
) -> list[str]:
    """:func:`uuid_url` of each ``(name, ids)`` of ``specs``, in order, with the
    URLconf and the script prefix looked up once and each id turned into text once
    (a turn's JSON names seven URLs over two ids)."""
    urlconf = str(get_urlconf() or settings.ROOT_URLCONF)
    prefix = get_script_prefix()
    texts: dict[uuid.UUID | str, str] = {}
    urls = []
    for name, ids in specs:
        template = _url_template(name, len(ids), prefix, urlconf)
        args = []
        for value in ids:
            text = texts.get(value)
            if text is None:
                text = texts[value] = _id_text(value)
            args.append(text)
        urls.append(template.format(*args))
    return urls
