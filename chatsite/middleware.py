"""Middleware of our own: the API handler's (chatsite/asgi.py)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from django.http import HttpRequest, HttpResponse
from django.utils.decorators import async_only_middleware


@async_only_middleware
def api_middleware(
    get_response: Callable[[HttpRequest], Awaitable[HttpResponse]],
) -> Callable[[HttpRequest], Awaitable[HttpResponse]]:
    """The API's one middleware, async-native: no hop to a sync thread.

    What the site's SecurityMiddleware and CommonMiddleware do that an API of Bearer
    keys and JSON needs: the Host header is checked against ALLOWED_HOSTS
    (``DisallowedHost``: 400) and responses carry ``X-Content-Type-Options: nosniff``.
    Each MiddlewareMixin middleware costs a request two thread hops; measured in-process
    (``GET /v1/models``): 6.8 ms with those two, 5.6 ms with this one.
    """

    async def middleware(request: HttpRequest) -> HttpResponse:
        request.get_host()
        response = await get_response(request)
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        return response

    return middleware
