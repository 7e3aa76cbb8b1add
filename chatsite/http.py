"""The one place that turns domain errors into HTTP responses (CONVENTIONS §3)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse

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
    return HttpResponse(error.message, status=error.status, content_type="text/plain")
