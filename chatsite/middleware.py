"""Middleware of our own: the API handler's (chatsite/asgi.py), and the site's
405 pages."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from asgiref.sync import iscoroutinefunction, sync_to_async
from csp.constants import HEADER as CSP_HEADER
from csp.utils import build_policy
from django.http import HttpRequest, HttpResponse
from django.utils.decorators import async_only_middleware, sync_and_async_middleware

from chatsite.http import method_not_allowed


@async_only_middleware
def api_middleware(
    get_response: Callable[[HttpRequest], Awaitable[HttpResponse]],
) -> Callable[[HttpRequest], Awaitable[HttpResponse]]:
    """The API's one middleware, async-native: no hop to a sync thread.

    What the site's SecurityMiddleware and CommonMiddleware do that an API of Bearer
    keys and JSON needs: the Host header is checked against ALLOWED_HOSTS
    (``DisallowedHost``: 400) and responses carry ``X-Content-Type-Options: nosniff``.
    Each MiddlewareMixin middleware costs a request two thread hops (figures in
    docs/benchmarks.md).

    Responses also carry the site's Content-Security-Policy (DESIGN §10), built by
    django-csp's ``build_policy`` from settings.CONTENT_SECURITY_POLICY: its
    CSPMiddleware, a MiddlewareMixin, would be a third pair of hops.
    """

    async def middleware(request: HttpRequest) -> HttpResponse:
        request.get_host()
        response = await get_response(request)
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        policy = build_policy()
        if policy:
            response.headers.setdefault(CSP_HEADER, policy)
        return response

    return middleware


def _empty_405(response: HttpResponse) -> bool:
    return (
        response.status_code == 405
        and not getattr(response, "streaming", False)
        and not response.content
    )


@sync_and_async_middleware
def method_not_allowed_pages(get_response: Any) -> Any:
    """Fill the empty body of a view's 405 (``require_POST`` and the like) with the
    site's page, or JSON for JSON clients (:func:`chatsite.http.method_not_allowed`).

    Sync and async: an async view (the chat's SSE stream) pays no thread hop; only a
    405 itself renders, in a thread, since the page's layout reads the session user.
    """
    if iscoroutinefunction(get_response):

        async def amiddleware(request: HttpRequest) -> HttpResponse:
            response = await get_response(request)
            if _empty_405(response):
                return await sync_to_async(method_not_allowed)(request, response)
            return response

        return amiddleware

    def middleware(request: HttpRequest) -> HttpResponse:
        response = get_response(request)
        if _empty_405(response):
            return method_not_allowed(request, response)
        return response

    return middleware
