"""Gateway views: the 429 page of request-rate limits."""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from chatsite.errors import QuotaExceeded
from chatsite.http import error_response
from gateway import ratelimits


def ratelimited(request: HttpRequest, exception: Exception) -> HttpResponse:
    """Answer a request django-ratelimit blocked: 429, ``Retry-After``, a clear message.

    JSON (``{"error": {"code", "message"}}``) for JSON clients, a short page otherwise.
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
    if "application/json" in request.headers.get("Accept", ""):
        return error_response(
            QuotaExceeded(message, code="rate_limited", retry_after_s=retry_s)
        )
    response = render(
        request, "gateway/ratelimited.html", {"message": message}, status=429
    )
    response["Retry-After"] = str(retry_s)
    return response
