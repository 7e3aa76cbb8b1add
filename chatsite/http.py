"""The one place that turns domain errors into HTTP responses (CONVENTIONS §3)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.template import loader

from chatsite.errors import DomainError, InvalidInput, PayloadTooLarge


def error_response(exc: DomainError) -> JsonResponse:
    """Return ``{"error": {"code", "message"}}`` with the error's status and headers."""
    response = JsonResponse(
        {"error": {"code": exc.code, "message": exc.message}}, status=exc.status
    )
    for name, value in exc.headers.items():
        response[name] = value
    return response


def json_errors(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """Decorate a sync JSON view so that a raised :class:`DomainError` becomes its response."""

    @functools.wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        try:
            return view(request, *args, **kwargs)
        except DomainError as exc:
            return error_response(exc)

    return wrapper


def bad_request(
    request: HttpRequest, exception: Exception | None = None
) -> HttpResponse:
    """handler400: a request body over DATA_UPLOAD_MAX_MEMORY_SIZE is a clear 413.

    Other bad requests get a plain 400. JSON when the client asked for JSON (the chat
    page's fetch calls do), otherwise a short text page.
    """
    from django.core.exceptions import RequestDataTooBig

    if isinstance(exception, RequestDataTooBig):
        error = PayloadTooLarge(
            "The request is too large. Messages can be at most "
            f"{settings.CHAT_MAX_MESSAGE_CHARS:,} characters.",
            code="request_too_large",
        )
    else:
        error = InvalidInput("The request could not be understood.", code="bad_request")
    if "application/json" in request.headers.get("Accept", ""):
        return error_response(error)
    return error_page(request, status=error.status, message=error.message)


# The status codes that have a page of their own (templates/errors/<status>.html);
# any other 4xx/5xx is shown with the 400 or 500 one.
ERROR_PAGES = {400, 403, 404, 429, 500, 503}


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
    """handler403: the 403 page (a CSRF failure has its own view, Django's)."""
    return error_page(request, status=403)


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
    """handler500: the 500 page, rendered without the request's context.

    No context processor runs, so the page needs neither the database nor the
    request's user (either may be what failed); it shows the signed-out layout.
    """
    html = loader.render_to_string("errors/500.html")
    return HttpResponse(html, status=500)
