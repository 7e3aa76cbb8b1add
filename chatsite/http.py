"""The one place that turns domain errors into HTTP responses (CONVENTIONS §3)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse

from chatsite.errors import DomainError


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
