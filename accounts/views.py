"""Account pages: the user's settings page (profile, password, preferences, API keys,
account deletion) and the "Tokens left" panel.

Every form POSTs, then redirects (POST-redirect-GET); an invalid form re-renders the
page with its errors (400) and stores nothing.
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages as flash
from django.contrib.auth import logout, update_session_auth_hash
from django.http import HttpResponse, HttpResponseBase
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods, require_POST

from accounts import services
from accounts.forms import AccountDeleteForm, ProfileForm, SettingsPasswordForm
from chatsite.auth import AuthenticatedRequest
from chatsite.errors import (
    DomainError,
    PageNotFound,
    error_page,
    error_render,
    wants_json,
)
from gateway import selectors
from gateway import services as gateway_services
from memory import selectors as memory_selectors

# The session key holding a just-created API key's secret until the page shows it once.
NEW_KEY_SESSION = "accounts.new_api_key"


@never_cache
@require_http_methods(["GET", "HEAD"])
def quota_panel(request: AuthenticatedRequest) -> HttpResponse:
    """The "Tokens left" panel alone (HTML), for the chat page to refresh after each
    answer (static/quota.js); the signed-in user's own windows only."""
    return render(
        request,
        "accounts/_quota.html",
        {"quota": selectors.quota_status(user=request.user)},
    )


def _settings_page(
    request: AuthenticatedRequest, *, status: int = 200, **forms: Any
) -> HttpResponse:
    """Render the settings page; ``forms`` replace the blank ones (to show errors)."""
    user = request.user
    context: dict[str, Any] = {
        "api_keys": selectors.api_key_list(user=user),
        # shown once: popped from the session by the first page that renders it
        "new_key": request.session.pop(NEW_KEY_SESSION, None),
        "quota": selectors.quota_status(user=user),
        "plan": selectors.plan_for_user(user=user),
        "preference": selectors.user_preference_get(user=user),
        "memory_enabled": memory_selectors.memory_enabled(user=user),
        "models": selectors.pool_choices(user=user),
        "profile_form": forms.get("profile_form") or ProfileForm(instance=user),
        "password_form": forms.get("password_form") or SettingsPasswordForm(user),
    }
    return render(request, "accounts/settings.html", context, status=status)


@never_cache
@require_http_methods(["GET", "HEAD", "POST"])
def account_settings(request: AuthenticatedRequest) -> HttpResponse:
    """GET: the settings page. POST: create an API key, then redirect to the page's
    ``#new-key`` block, which shows its secret once (kept in the session only until
    then); the fragment scrolls the block into view and the block takes focus."""
    if request.method == "POST":
        _key, raw = gateway_services.api_key_create(
            user=request.user, name=request.POST.get("name", "")
        )
        request.session[NEW_KEY_SESSION] = raw
        return redirect(reverse("account-settings") + "#new-key")
    return _settings_page(request)


@require_POST
def preferences_update(request: AuthenticatedRequest) -> HttpResponse:
    """Store the preferences form (an unticked box turns its setting off)."""
    post = request.POST
    reuse = post.get("reuse_cached_answers", "").lower() in {"on", "true", "1"}
    try:
        services.preferences_save(
            user=request.user,
            reuse_cached_answers=reuse,
            memory_enabled=post.get("memory_enabled", "").lower() in {"on", "1"},
            default_model=post.get("default_model", ""),
        )
    except DomainError as exc:
        flash.error(request, exc.message)
        return redirect("account-settings")
    flash.success(
        request,
        "Preferences saved. "
        + ("Cached answers are on." if reuse else "Cached answers are off."),
    )
    return redirect("account-settings")


@require_POST
def theme_update(request: AuthenticatedRequest) -> HttpResponseBase:
    """Store the top bar's theme choice (``theme``: system, light or dark).

    A fetch (``Accept: application/json``, static/site.js) gets 204; a plain form POST
    is sent back to ``next`` (a path on this site) or the settings page. An unknown
    theme is a 400 and stores nothing.
    """
    try:
        services.theme_save(user=request.user, theme=request.POST.get("theme", ""))
    except DomainError as exc:
        return error_render(request, exc)
    if wants_json(request):
        return HttpResponse(status=204)
    target = request.POST.get("next", "")
    if not url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        target = reverse("account-settings")
    return redirect(target)


@require_POST
def profile_update(request: AuthenticatedRequest) -> HttpResponse:
    """Change the username and e-mail address."""
    form = ProfileForm(request.POST, instance=request.user)
    if not form.is_valid():
        request.user.refresh_from_db()  # the form's validation touched the instance
        return _settings_page(request, status=400, profile_form=form)
    try:
        services.profile_update(
            user=request.user,
            username=form.cleaned_data["username"],
            email=form.cleaned_data["email"],
        )
    except DomainError as exc:
        flash.error(request, exc.message)
        return redirect("account-settings")
    flash.success(request, "Profile saved.")
    return redirect("account-settings")


@require_POST
def password_change(request: AuthenticatedRequest) -> HttpResponse:
    """Change the password (Django's PasswordChangeForm: old password, validators);
    this session stays signed in, the user's other sessions end."""
    form = SettingsPasswordForm(request.user, request.POST)
    if not form.is_valid():
        return _settings_page(request, status=400, password_form=form)
    user = form.save()
    update_session_auth_hash(request, user)
    flash.success(request, "Password changed.")
    return redirect("account-settings")


@require_http_methods(["GET", "HEAD", "POST"])
def api_key_revoke(request: AuthenticatedRequest, key_id: int) -> HttpResponse:
    """GET: ask for confirmation. POST: revoke one of the user's API keys (another
    user's key is a 404)."""
    keys = selectors.api_key_list(user=request.user)
    key = keys.filter(pk=key_id).first()
    if key is None:
        return error_page(request, PageNotFound())
    if request.method in ("GET", "HEAD"):
        return render(
            request,
            "confirm.html",
            {
                "title": "Revoke this API key?",
                "message": f"Programs using the key {key.prefix}… "
                f"({key.name or 'unnamed'}) will be refused from now on. "
                "This cannot be undone.",
                "action": reverse("api-key-revoke", args=[key.pk]),
                "cancel": reverse("account-settings"),
                "button": "Revoke",
            },
        )
    gateway_services.api_key_revoke(user=request.user, key_id=key.pk)
    flash.success(request, f"Revoked the key {key.prefix}…")
    return redirect("account-settings")


@never_cache
@require_http_methods(["GET", "HEAD", "POST"])
def account_delete(request: AuthenticatedRequest) -> HttpResponse:
    """GET: the deletion page (what goes; type your password). POST: delete the
    account and everything in it, sign out, and go to the sign-in page."""
    form = AccountDeleteForm(request.POST or None, user=request.user)
    if request.method == "POST":
        if form.is_valid():
            user = request.user
            services.account_delete(user=user)  # a failure leaves the session as it was
            logout(request)
            flash.success(request, "Your account and all its data were deleted.")
            return redirect("login")
        return render(
            request, "accounts/account_delete.html", {"form": form}, status=400
        )
    return render(request, "accounts/account_delete.html", {"form": form})
