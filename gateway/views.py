"""Gateway views: the 429 page of request-rate limits; the user's settings (API keys,
preferences)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib import messages as flash
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from chatsite.errors import DomainError, QuotaExceeded
from chatsite.http import error_response
from gateway import ratelimits, selectors, services


def ratelimited(request: HttpRequest, exception: Exception) -> HttpResponse:
    """Answer a request django-ratelimit blocked: 429, ``Retry-After``, a clear message.

    JSON (``{"error": {"code", "message"}}``) for JSON clients, a short page otherwise.
    Wired as RATELIMIT_VIEW (django_ratelimit's middleware calls it).
    """
    is_login = request.resolver_match is not None and (
        request.resolver_match.url_name == "login"
    )
    rate = settings.LOGIN_RATE if is_login else settings.CHAT_MESSAGE_RATE
    retry_s = ratelimits.rate_period_s(rate)
    what = "sign-in attempts" if is_login else "messages"
    message = (
        f"Too many {what} (the limit is {rate.replace('/', ' per ')}). "
        f"Please wait up to {retry_s} seconds and try again."
    )
    if "application/json" in request.headers.get("Accept", "") or not is_login:
        return error_response(
            QuotaExceeded(message, code="rate_limited", retry_after_s=retry_s)
        )
    response = render(
        request, "gateway/ratelimited.html", {"message": message}, status=429
    )
    response["Retry-After"] = str(retry_s)
    return response


@require_http_methods(["GET", "POST"])
def account_settings(request: HttpRequest) -> HttpResponse:
    """The user's settings page: quota left, preferences, and API keys (create
    once-shown, revoke)."""
    new_key: str | None = None
    if request.method == "POST":
        _key, new_key = services.api_key_create(
            user=request.user, name=request.POST.get("name", "")
        )
    context: dict[str, Any] = {
        "api_keys": selectors.api_key_list(user=request.user),
        "new_key": new_key,
        "quota": selectors.quota_status(user=request.user),
        "plan": selectors.plan_for_user(user=request.user),
        "preference": selectors.user_preference_get(user=request.user),
    }
    return render(request, "gateway/settings.html", context)


@require_POST
def preferences_update(request: HttpRequest) -> HttpResponse:
    """Store the preferences form of the settings page (an unticked box turns it off)."""
    reuse = request.POST.get("reuse_cached_answers", "").lower() in {"on", "true", "1"}
    services.user_preference_set(user=request.user, reuse_cached_answers=reuse)
    flash.success(
        request,
        "Cached answers are on." if reuse else "Cached answers are off.",
    )
    return redirect("account-settings")


@require_POST
def api_key_revoke(request: HttpRequest, key_id: int) -> HttpResponse:
    """Revoke one of the user's API keys (another user's key is a 404)."""
    try:
        key = services.api_key_revoke(user=request.user, key_id=key_id)
    except DomainError as exc:
        return error_response(exc)
    flash.success(request, f"Revoked the key {key.prefix}…")
    return redirect("account-settings")
