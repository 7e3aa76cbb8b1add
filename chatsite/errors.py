"""Domain exceptions shared by every app, and the one place that renders them
(CONVENTIONS §3).

Services raise a :class:`DomainError` (a status, a stable ``code``, a message written
for the person who sees it, retry fields and headers). Every surface shows it through
the renderer below, in one of four shapes with the same code, message and status:

- :func:`error_json` / :func:`error_response`: the chat's JSON
  ``{"error": {"code", "message"}}``;
- the same with ``openai=True``: OpenAI's ``{"error": {"message", "type", "param",
  "code"}}``, a superset of the chat's, with the headers OpenAI's clients read;
- :func:`error_sse`: the SSE ``error`` frame ``{"code", "message", ...,
  "retryable", "retry_after_s"}``;
- :func:`error_page`: the HTML page ``templates/errors/<status>.html``.

:func:`wants_json` decides between JSON and a page, and :func:`error_render` applies
it (Django's error handlers in :mod:`chatsite.http` and the rate limit's 429 use it);
:func:`error_refusal` answers a request a middleware refuses before its view.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.template import loader

from chatsite.sse import sse_frame

# The name of the SSE event that carries an error (inference.protocol.EVENT_ERROR, the
# worker's event of the same name).
SSE_ERROR = "error"


class DomainError(Exception):
    """Base of the errors a user can see: an HTTP status, a stable code and a message."""

    status = 400
    code = "bad_request"
    message = "The request could not be processed."
    # Whether the same request can succeed later (a client may retry it after
    # ``retry_after_s`` seconds). Surfaces read these fields, never the message text.
    retryable = False
    # The request field the error is about (OpenAI's ``error.param``), where one is.
    param: str | None = None

    def __init__(
        self,
        message: str | None = None,
        *,
        code: str | None = None,
        headers: dict[str, str] | None = None,
        retryable: bool | None = None,
        retry_after_s: int | None = None,
        status: int | None = None,
    ) -> None:
        self.message = message or self.message
        self.code = code or self.code
        self.headers = dict(headers or {})
        if status is not None:
            self.status = status
        if retryable is not None:
            self.retryable = retryable
        if retry_after_s is None and "Retry-After" in self.headers:
            retry_after_s = int(self.headers["Retry-After"])
        self.retry_after_s = retry_after_s
        if retry_after_s is not None:
            self.headers.setdefault("Retry-After", str(retry_after_s))
        super().__init__(self.message)


class InvalidInput(DomainError):
    """The input is malformed or empty (400)."""

    status = 400
    code = "invalid_input"


class PayloadTooLarge(DomainError):
    """The input is over a configured size limit (413)."""

    status = 413
    code = "too_large"


class NotFound(DomainError):
    """The object does not exist or belongs to someone else (404, never 403: no leak)."""

    status = 404
    code = "not_found"
    message = "Not found."


class Conflict(DomainError):
    """The object is in a state that forbids the action (409)."""

    status = 409
    code = "conflict"


class ServiceUnavailable(DomainError):
    """A backing service cannot take the request now (503, with ``Retry-After``)."""

    status = 503
    code = "unavailable"
    retryable = True


class Forbidden(DomainError):
    """The user may not do this (403), e.g. a model their plan does not include."""

    status = 403
    code = "forbidden"


class QuotaExceeded(DomainError):
    """A token or request limit is reached (429, with ``Retry-After`` and
    ``x-ratelimit-*`` headers)."""

    status = 429
    code = "quota_exceeded"
    message = "You have reached a usage limit. Please wait and try again."
    retryable = True


class PoolSaturated(ServiceUnavailable):
    """Every model pool that could serve the request is busy or down (503)."""

    code = "pool_saturated"
    message = "The assistant is busy right now. Please try again in a moment."


class ModerationBlocked(InvalidInput):
    """The input was refused by the content policy (400, OpenAI's
    ``content_policy_violation`` on ``messages``). ``category`` is the matched
    moderation category's value; the message names it and says what the user can do.
    ``event_id`` is the recorded event's id, rendered as ``moderation_event_id``."""

    status = 400
    code = "content_policy_violation"
    param = "messages"
    message = "This message was not sent because it goes against the content policy."

    def __init__(
        self,
        message: str | None = None,
        *,
        category: str = "",
        event_id: int | None = None,
    ) -> None:
        super().__init__(message)
        self.category = category
        # the ModerationEvent recorded for the block: the user may appeal it
        # (docs/safety.md, "Appeals"); both JSON shapes carry it
        self.event_id = event_id


class Suspended(Forbidden):
    """The user's account is suspended (403 ``account_suspended``): the message names
    the reason and when the suspension ends (UTC)."""

    code = "account_suspended"
    message = "Your account is suspended."
    # the blocked input that caused an automatic suspension (rendered as
    # ``moderation_event_id``, to appeal), None otherwise
    event_id: int | None = None


class PageNotFound(NotFound):
    """The address or the object a page shows does not exist, or it is someone
    else's (404, never 403: no leak)."""

    message = "This page does not exist, or it is not yours."


class MethodNotAllowed(DomainError):
    """The address does not take the request's method (405). Raisers name the
    methods it takes in the message and in an ``Allow`` header."""

    status = 405
    code = "method_not_allowed"


class InvalidApiKey(DomainError):
    """A missing, unknown or revoked API key (401; the OpenAI shape adds
    ``WWW-Authenticate: Bearer``)."""

    status = 401
    code = "invalid_api_key"
    message = (
        "Incorrect or missing API key. Send `Authorization: Bearer sk-...` with a key "
        "from your settings page."
    )


# --- the renderer ----------------------------------------------------------------------


def wants_json(request: HttpRequest) -> bool:
    """Whether to answer ``request`` in JSON rather than with a page: a request to the
    API (a path under ``/v1/`` or a URL named ``api-*``), or a client whose ``Accept``
    header names ``application/json`` (the chat page's fetch calls)."""
    match = getattr(request, "resolver_match", None)
    if match is not None and (match.url_name or "").startswith("api-"):
        return True
    return request.path.startswith("/v1/") or "application/json" in (
        request.headers.get("Accept", "")
    )


def _openai_type(exc: DomainError) -> str:
    """OpenAI's ``type`` of ``exc``, from its status (and a 429's code): the official
    clients pick their exception class from the status, and ``type`` is shown."""
    if exc.status == 429:
        if exc.code == "rate_limit_requests":
            return "requests"
        return "tokens" if exc.code == "quota_minute" else "insufficient_quota"
    if exc.status >= 500:
        return "server_error"
    if exc.status == 403:
        return "permission_error"
    return "invalid_request_error"


def error_json(exc: DomainError, *, openai: bool = False) -> dict[str, Any]:
    """Return the JSON body of ``exc``.

    The chat's shape is ``{"error": {"code", "message"}}``. With ``openai``, OpenAI's
    ``{"error": {"message", "type", "param", "code"}}``: ``type`` from the status,
    ``param`` the request field the error is about when the raiser named one (an
    optional ``param`` attribute, e.g. :class:`ModerationBlocked`), else None.
    Either shape adds ``moderation_event_id`` when the error carries one (a block the
    user may appeal).
    """
    if not openai:
        body: dict[str, Any] = {"code": exc.code, "message": exc.message}
    else:
        body = {
            "message": exc.message,
            "type": _openai_type(exc),
            "param": getattr(exc, "param", None),
            "code": exc.code,
        }
    event_id = getattr(exc, "event_id", None)
    if event_id is not None:
        body["moderation_event_id"] = event_id
    return {"error": body}


def _headers_set(response: HttpResponse, exc: DomainError, *, openai: bool) -> None:
    """Copy ``exc.headers`` (``Retry-After``, ``Allow``, ``x-ratelimit-*``) onto
    ``response``; with ``openai``, add what OpenAI's clients read: ``WWW-Authenticate:
    Bearer`` on a 401, and ``x-should-retry: false`` on a 429 that retrying cannot fix
    (``exc.retryable`` false: the request alone is over the limit)."""
    for name, value in exc.headers.items():
        response[name] = value
    if openai and exc.status == 401:
        response["WWW-Authenticate"] = "Bearer"
    if openai and exc.status == 429 and not exc.retryable:
        response["x-should-retry"] = "false"


def error_response(exc: DomainError, *, openai: bool = False) -> JsonResponse:
    """Return ``exc`` as a JSON response: :func:`error_json`'s body (the chat's shape,
    or OpenAI's with ``openai``), the error's status and its headers."""
    response = JsonResponse(error_json(exc, openai=openai), status=exc.status)
    _headers_set(response, exc, openai=openai)
    return response


def error_sse(exc: DomainError, *, event_id: str | None = None, **fields: Any) -> str:
    """Return the SSE ``error`` frame of ``exc`` (:func:`chatsite.sse.sse_frame`).

    Data: ``{"code", "message", **fields, "retryable", "retry_after_s"}``
    (``retry_after_s`` in seconds, or None). ``fields`` are the event's other keys:
    the answer's ``message_id``, or the whole stored answer of a failed one
    (:mod:`conversations.events` states the schema).
    """
    data = {
        "code": exc.code,
        "message": exc.message,
        **fields,
        "retryable": exc.retryable,
        "retry_after_s": exc.retry_after_s,
    }
    return sse_frame(SSE_ERROR, data, event_id)


# The statuses that have a page of their own (templates/errors/<status>.html); any
# other 4xx/5xx is shown with the 400 or the 500 one.
ERROR_PAGES = frozenset({400, 403, 404, 405, 429, 500, 503})


def error_page(request: HttpRequest | None, exc: DomainError) -> HttpResponse:
    """Return the HTML error page of ``exc``: its status's page (:data:`ERROR_PAGES`;
    else the 400 page for a 4xx, the 500 one otherwise) showing ``exc.message``, with
    the error's status and headers.

    With a ``request``, the page is in the site's layout (the signed-in user's
    sidebar). Without one (None), no context processor runs, so rendering needs
    neither the database nor the session: the page for when either has failed.
    """
    status = exc.status
    name = status if status in ERROR_PAGES else (400 if status < 500 else 500)
    template = f"errors/{name}.html"
    context = {"message": exc.message}
    if request is None:
        response = HttpResponse(
            loader.render_to_string(template, context), status=status
        )
    else:
        response = render(request, template, context, status=status)
    _headers_set(response, exc, openai=False)
    return response


def error_render(request: HttpRequest, exc: DomainError) -> HttpResponse:
    """Answer ``request`` with ``exc``: JSON in OpenAI's shape when the client
    :func:`wants_json` (the shape the API needs; the chat page reads its ``code`` and
    ``message``), otherwise the :func:`error_page` in the site's layout."""
    if wants_json(request):
        return error_response(exc, openai=True)
    return error_page(request, exc)


def error_refusal(request: HttpRequest, exc: DomainError) -> HttpResponse:
    """Answer a request refused before its view ran (a middleware's refusal): the
    :func:`error_page` for a browser's page request (``Accept`` names ``text/html``
    and the client does not :func:`wants_json`), else the chat's JSON
    (:func:`error_response`), which the site's JSON endpoints and fetch calls read."""
    accept = request.headers.get("Accept", "")
    if "text/html" in accept and not wants_json(request):
        return error_page(request, exc)
    return error_response(exc)
