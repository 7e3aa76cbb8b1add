"""The one mapping of domain errors to OpenAI's error shape and HTTP (CONVENTIONS §3).

Body: ``{"error": {"message", "type", "param", "code"}}``, the shape the official
clients parse into their exception classes (``type`` picks none of them; the status
does). Headers: the exception's own (``Retry-After``, ``x-ratelimit-*``), plus
``WWW-Authenticate`` on a 401 and ``x-should-retry: false`` on a 429 that retrying
cannot fix, read from the exception's ``retryable`` field.
"""

from __future__ import annotations

from typing import Any

from django.http import JsonResponse

from chatsite.errors import DomainError, InvalidInput


class InvalidApiKey(DomainError):
    """A missing, unknown or revoked API key (401)."""

    status = 401
    code = "invalid_api_key"
    message = (
        "Incorrect or missing API key. Send `Authorization: Bearer sk-...` with a key "
        "from your settings page."
    )


def _error_type(exc: DomainError) -> str:
    if exc.status == 429:
        return "tokens" if exc.code == "quota_minute" else "insufficient_quota"
    if exc.status >= 500:
        return "server_error"
    if exc.status == 403:
        return "permission_error"
    return "invalid_request_error"


def error_body(exc: DomainError) -> dict[str, Any]:
    """Return OpenAI's error object for ``exc``.

    ``param`` is the request field the error is about when the raiser named one
    (an optional ``param`` attribute, see :mod:`.requests`), else None.
    """
    return {
        "error": {
            "message": exc.message,
            "type": _error_type(exc),
            "param": getattr(exc, "param", None),
            "code": exc.code,
        }
    }


def error_response(exc: DomainError) -> JsonResponse:
    """Return ``exc`` as an OpenAI error response, with its status and headers.

    A 429 that can never succeed (``exc.retryable`` false: the request alone is over
    the limit) carries ``x-should-retry: false`` so the official clients do not
    retry it.
    """
    response = JsonResponse(error_body(exc), status=exc.status)
    for name, value in exc.headers.items():
        response[name] = value
    if exc.status == 401:
        response["WWW-Authenticate"] = "Bearer"
    if exc.status == 429 and not exc.retryable:
        response["x-should-retry"] = "false"
    return response


def method_not_allowed(method: str) -> JsonResponse:
    """Return the 405 for an endpoint that takes only ``method`` (with ``Allow``)."""
    exc = InvalidInput(
        f"Use {method} on this endpoint.", code="method_not_allowed", status=405
    )
    response = error_response(exc)
    response["Allow"] = method
    return response
