"""Gateway views: the 429 page of request-rate limits."""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest, HttpResponse

from chatsite.errors import QuotaExceeded, error_render, error_response
from gateway import ratelimits


def ratelimited(request: HttpRequest, exception: Exception) -> HttpResponse:
    """Answer a request django-ratelimit blocked: 429, ``Retry-After``, a clear message.

    A refused chat message gets the chat's JSON (the same answer as
    :mod:`chatsite.asgi` gives the session's next ones); a refused sign-in JSON for
    JSON clients, the 429 page otherwise (:func:`chatsite.errors.error_render`).
    Wired as RATELIMIT_VIEW (django_ratelimit's middleware calls it). A refused chat
    message marks its session, so the next ones are refused before Django runs until
    the window ends (:func:`gateway.ratelimits.refusal_remember`).
    """
    is_login = request.resolver_match is not None and (
        request.resolver_match.url_name == "login"
    )
    if not is_login:
        ratelimits.refusal_remember(request=request)
        return error_response(ratelimits.message_refusal())
    rate = settings.LOGIN_RATE
    retry_s = ratelimits.rate_period_s(rate)
    message = (
        f"Too many sign-in attempts (the limit is {ratelimits.rate_describe(rate)}). "
        f"Please wait up to {retry_s} seconds and try again."
    )
    return error_render(
        request, QuotaExceeded(message, code="rate_limited", retry_after_s=retry_s)
    )
