"""Middleware of our own: the API handler's (chatsite/asgi.py), the site's 405 pages,
and django-csp's with its policy built once (:class:`CSPMiddleware`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from asgiref.sync import iscoroutinefunction, sync_to_async
from csp import middleware as csp_middleware
from csp.constants import HEADER as CSP_HEADER
from csp.constants import HEADER_REPORT_ONLY as CSP_HEADER_REPORT_ONLY
from csp.utils import build_policy
from django.conf import settings
from django.core.signals import setting_changed
from django.dispatch import receiver
from django.http import HttpRequest, HttpResponse
from django.http.response import HttpResponseBase
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
        policy = csp_policy()
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


_policies: dict[bool, str] = {}


def csp_policy(*, report_only: bool = False) -> str:
    """django-csp's ``build_policy`` of the settings alone (CONTENT_SECURITY_POLICY, or
    CONTENT_SECURITY_POLICY_REPORT_ONLY): no view's own config, update or replace, no
    nonce. Built once per process; again after a change of those settings
    (``setting_changed``: the tests')."""
    policy = _policies.get(report_only)
    if policy is None:
        policy = _policies[report_only] = build_policy(report_only=report_only)
    return policy


@receiver(setting_changed)
def _policies_forget(*, setting: str, **_kwargs: Any) -> None:
    if setting.startswith("CONTENT_SECURITY_POLICY"):
        _policies.clear()


# what django-csp's view decorators set on a response: a policy of its own
_VIEW_POLICY_ATTRS = tuple(
    f"_csp_{kind}{ro}" for kind in ("config", "update", "replace") for ro in ("", "_ro")
)


class CSPMiddleware(csp_middleware.CSPMiddleware):
    """django-csp's middleware whose header, for a response with no policy of its own
    and a request that used no nonce (every response of this site so far), is
    :func:`csp_policy`'s, built once, not per response; any other response goes
    through django-csp's own build. The rules are django-csp's: DEBUG's 404 and 500
    pages, ``_csp_exempt``, EXCLUDE_URL_PREFIXES, a header already set."""

    def process_response(
        self, request: HttpRequest, response: HttpResponseBase
    ) -> HttpResponseBase:
        """Set the policy headers (see the class)."""
        if getattr(request, "_csp_nonce", None) is not None or any(
            getattr(response, name, None) is not None for name in _VIEW_POLICY_ATTRS
        ):
            return super().process_response(request, response)
        if response.status_code in (404, 500) and settings.DEBUG:
            return response
        for report_only, header, exempt in (
            (False, CSP_HEADER, "_csp_exempt"),
            (True, CSP_HEADER_REPORT_ONLY, "_csp_exempt_ro"),
        ):
            policy = csp_policy(report_only=report_only)
            if not policy or header in response:
                continue
            if getattr(response, exempt, False) is not False:
                continue
            name = "CONTENT_SECURITY_POLICY" + ("_REPORT_ONLY" if report_only else "")
            prefixes = (getattr(settings, name, None) or {}).get(
                "EXCLUDE_URL_PREFIXES"
            ) or ()
            if not request.path_info.startswith(tuple(prefixes)):
                response[header] = policy
        # as django-csp: a nonce asked for after the header was written is an error
        request.csp_nonce = csp_middleware.CheckableLazyObject(  # type: ignore[attr-defined]
            self._csp_nonce_post_response
        )
        return response
