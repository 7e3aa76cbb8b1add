"""The app's own cap on request bodies, enforced in front of Django (chatsite/asgi.py).

Django refuses an oversized body only lazily, when a view first reads ``request.POST``
or ``request.body`` (RequestDataTooBig; a file part not at all), after its ASGI handler
has already read the whole body to a temporary file. Here a body is refused before
any of it is parsed: by its ``Content-Length`` header at once, and a body sent without
one (chunked) as soon as the bytes received pass the cap. The refusal is a 413 in the
site's shape: OpenAI-shaped JSON under ``/v1/`` and for JSON clients, the site's page
otherwise (:func:`chatsite.errors.wants_json` rules, decided from the path and the
``Accept`` header since no Django request exists yet).

Caps: settings.REQUEST_MAX_BODY_BYTES, or for an upload form (its URL name in
settings.REQUEST_BODY_CAPS) the file's own limit plus REQUEST_UPLOAD_FORM_BYTES.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from django.conf import settings
from django.http import HttpResponse
from django.urls import Resolver404, get_resolver

from chatsite.errors import PayloadTooLarge, error_page, error_response

# ASGI callables (Django's handler types them with Mapping messages).
Receive = Callable[[], Awaitable[Any]]
Send = Callable[[Any], Awaitable[None]]
App = Callable[[dict[str, Any], Any, Any], Awaitable[None]]


def body_cap(path: str) -> int:
    """Return the largest body, bytes, that a request to ``path`` may send: an upload
    form's file limit (the setting REQUEST_BODY_CAPS names for its URL) plus
    REQUEST_UPLOAD_FORM_BYTES, else REQUEST_MAX_BODY_BYTES."""
    caps: dict[str, str] = getattr(settings, "REQUEST_BODY_CAPS", {})
    default = int(settings.REQUEST_MAX_BODY_BYTES)
    if not caps:
        return default
    try:
        name = get_resolver().resolve(path).url_name or ""
    except Resolver404:
        return default
    if name not in caps:
        return default
    file_limit = int(getattr(settings, caps[name]))
    return max(default, file_limit + int(settings.REQUEST_UPLOAD_FORM_BYTES))


def _header(scope: dict[str, Any], name: bytes) -> str:
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return str(value.decode("latin-1"))
    return ""


def _body_unframed(scope: dict[str, Any]) -> bool:
    """Whether a request without ``Content-Length`` may still carry a body: HTTP/1.1
    with ``Transfer-Encoding`` (chunked), or HTTP/2 and later, whose frames carry it."""
    version = str(scope.get("http_version", "1.1"))
    return bool(_header(scope, b"transfer-encoding")) or version not in {"1.0", "1.1"}


def too_large_response(scope: dict[str, Any], cap: int) -> HttpResponse:
    """The 413 of a body over ``cap`` bytes: OpenAI JSON for the API and JSON
    clients, the site's page (rendered without a request) for everyone else."""
    error = PayloadTooLarge(
        f"The request is larger than the limit of {cap:,} bytes "
        f"({cap / 1024 / 1024:.1f} MB) for this address. Nothing was saved.",
        code="request_too_large",
    )
    path = str(scope.get("path", ""))
    if path.startswith("/v1/") or "application/json" in _header(scope, b"accept"):
        return error_response(error, openai=True)
    return error_page(None, error)


async def response_send(response: HttpResponse, send: Send) -> None:
    """Send a complete (non-streaming) Django ``response`` as ASGI messages, for answers
    given before Django's handler runs (no middleware: the headers are the response's
    own plus ``Content-Length`` and ``X-Content-Type-Options: nosniff``)."""
    body = response.content
    headers = [
        (name.lower().encode("latin-1"), str(value).encode("latin-1"))
        for name, value in response.items()
    ]
    headers += [
        (b"content-length", str(len(body)).encode("ascii")),
        (b"x-content-type-options", b"nosniff"),
    ]
    await send(
        {
            "type": "http.response.start",
            "status": response.status_code,
            "headers": headers,
        }
    )
    await send({"type": "http.response.body", "body": body})


async def body_capped(
    app: App, scope: dict[str, Any], receive: Receive, send: Send
) -> None:
    """Run ``app`` on the request, or answer 413 when its body is over the cap.

    A body with a ``Content-Length`` within the cap goes on untouched (the server
    frames the body by it), as does a request that has no body. One without a length
    (chunked) is read here, as Django's handler
    would read it next, and handed on unchanged; over the cap it is refused without
    reading further.
    """
    declared = _header(scope, b"content-length")
    if declared.isdigit() and int(declared) <= settings.REQUEST_MAX_BODY_BYTES:
        await app(scope, receive, send)  # within every cap: no URL lookup
        return
    path = str(scope.get("path", ""))
    if not declared and not _body_unframed(scope):
        await app(scope, receive, send)  # no body (RFC 9112 §6.3)
        return
    if declared.isdigit():
        cap = body_cap(path)
        if int(declared) > cap:
            await response_send(too_large_response(scope, cap), send)
        else:
            await app(scope, receive, send)
        return
    received: list[dict[str, Any]] = []
    size, cap = 0, int(settings.REQUEST_MAX_BODY_BYTES)
    while True:
        message = await receive()
        received.append(message)
        if message["type"] != "http.request":
            break
        size += len(message.get("body", b""))
        if size > cap:
            cap = body_cap(path)  # looked up only for a large body
        if size > cap:
            await response_send(too_large_response(scope, cap), send)
            return
        if not message.get("more_body", False):
            break

    async def replay() -> dict[str, Any]:
        if received:
            return received.pop(0)
        return await receive()

    await app(scope, replay, send)
