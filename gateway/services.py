"""Gateway services for accounts: API keys and user preferences.

The generation lifecycle (admit, start, follow, settle) lives in
:mod:`gateway.generations`.
"""

from __future__ import annotations

import functools
import hashlib
import secrets
from typing import Any

from django.contrib.auth.models import User
from django.utils import timezone

from chatsite.db import connection_return
from chatsite.errors import NotFound
from gateway import apikey_cache, requestrate, selectors
from gateway.models import ApiKey, UserPreference
from safety import selectors as safety_selectors

API_KEY_PREFIX = "sk-"


def _key_hash(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


def api_key_create(*, user: User, name: str = "") -> tuple[ApiKey, str]:
    """Create an API key for ``user``; return it and the secret, shown only this once.

    The secret is ``sk-`` + 43 URL-safe characters (256 random bits); only its SHA-256
    and its first 10 characters (``prefix``) are stored.
    """
    raw = API_KEY_PREFIX + secrets.token_urlsafe(32)
    key = ApiKey.objects.create(
        user=user, name=name.strip()[:100], prefix=raw[:10], key_hash=_key_hash(raw)
    )
    return key, raw


def api_key_revoke(*, key_id: Any, user: User | None = None) -> ApiKey:
    """Revoke a key (idempotent). With ``user``, only that user's key (else NotFound)."""
    keys = ApiKey.objects.all() if user is None else ApiKey.objects.filter(user=user)
    try:
        key = keys.get(pk=key_id)
    except (ApiKey.DoesNotExist, ValueError, TypeError) as exc:
        raise NotFound("This API key does not exist.") from exc
    if key.revoked_at is None:
        ApiKey.objects.filter(pk=key.pk, revoked_at__isnull=True).update(
            revoked_at=timezone.now()
        )
        key.refresh_from_db()
    apikey_cache.apikey_forget(key.key_hash)
    return key


# ``ApiKey.last_used_at`` is written at most this often (s): a write per request would
# double the cost of authenticating one (one query instead of two).
API_KEY_LAST_USED_RESOLUTION_S = 60
# The attribute :func:`api_key_authenticate` sets on the user: the id of the key used.
API_KEY_ID_ATTR = "_api_key_id"


def api_key_authenticate(*, raw: str) -> User | None:
    """Return the active user owning the secret ``raw``, or None.

    The lookup is kept per process for GATEWAY_API_KEY_CACHE_S seconds
    (:mod:`gateway.apikey_cache`: a revoked key, a deactivated or suspended user or a
    changed subscription applies within that bound; a revocation through
    :func:`api_key_revoke` at once on its own process). Stamps ``last_used_at`` when
    it is older than API_KEY_LAST_USED_RESOLUTION_S seconds (the settings page shows
    it to the minute).
    """
    if not raw or not raw.startswith(API_KEY_PREFIX):
        return None
    key_hash = _key_hash(raw)
    cached = apikey_cache.apikey_cached(
        key_hash, refresh=functools.partial(_api_key_reload, key_hash)
    )
    if cached is not None:
        key, user, suspended = cached
    else:
        key = _api_key_load(key_hash)
        if key is None or not key.user.is_active:
            return None
        suspended = key.user_suspended
        apikey_cache.apikey_remember(key_hash, key=key, suspended=suspended)
        user = key.user
    setattr(user, safety_selectors.SUSPENDED_ATTR, suspended)
    setattr(user, API_KEY_ID_ATTR, key.pk)
    now = timezone.now()
    if key.last_used_at is None or (now - key.last_used_at).total_seconds() >= (
        API_KEY_LAST_USED_RESOLUTION_S
    ):
        ApiKey.objects.filter(pk=key.pk).update(last_used_at=now)
        apikey_cache.apikey_used(key_hash, at=now)
    return user


def _api_key_reload(key_hash: str) -> tuple[Any, bool] | None:
    """The cache's background refresh of ``key_hash``: ``(key, suspended)`` of an
    active key of an active user, else None; the thread's connection goes back to
    the pool after."""
    try:
        key = _api_key_load(key_hash)
    finally:
        connection_return()
    if key is None or not key.user.is_active:
        return None
    return key, key.user_suspended


def _api_key_load(key_hash: str) -> Any:
    """The active key (an ApiKey) of ``key_hash`` with its user and subscription,
    annotated ``user_suspended``; None if there is none.

    One query for the whole admission: the subscription (plan_for_user needs no
    query of its own) and whether a suspension is in force (neither does
    suspension_check). No ORDER BY (``first()`` adds one): key_hash is unique, and
    compiling the ordering cost as much as running the query.
    """
    return next(
        iter(
            ApiKey.objects.select_related("user", "user__subscription")
            .annotate(
                user_suspended=safety_selectors.suspension_in_force(user_ref="user_id")
            )
            .filter(key_hash=key_hash, revoked_at__isnull=True)[:1]
        ),
        None,
    )


def api_request_count(*, user: User) -> requestrate.RequestCount:
    """Count one API request of ``user`` (as :func:`api_key_authenticate` returned
    them: the key they used is known) against their plan's requests per minute, for
    them and for the key (:func:`gateway.requestrate.request_count`). Raises
    QuotaExceeded (429 ``rate_limit_requests``, Retry-After, ``x-ratelimit-*``)."""
    return api_request_counter(user=user).count()


def api_request_counter(*, user: User) -> requestrate.RequestCounter:
    """Return the uncounted :class:`gateway.requestrate.RequestCounter` of one API
    request of ``user`` (as :func:`api_key_authenticate` returned them), with their
    plan's limits: counted later, e.g. by the token reservation
    (:attr:`gateway.generations.GenerationRequest.request_count`)."""
    plan = selectors.plan_for_user(user=user)
    return requestrate.RequestCounter(
        user_id=user.pk,
        key_id=getattr(user, API_KEY_ID_ATTR, None),
        user_limit=plan.requests_per_minute,
        key_limit=plan.key_requests_per_minute,
    )


def user_preference_set(*, user: User, reuse_cached_answers: bool) -> UserPreference:
    """Store the user's gateway preferences (creates the row on first use); return it.

    ``reuse_cached_answers`` True opts the user's chat turns in to the answer caches
    (:mod:`gateway.cache`: identical or near-identical questions answered from their
    own earlier answers, even at temperature > 0). Idempotent.
    """
    preference, _ = UserPreference.objects.update_or_create(
        user_id=user.pk,
        defaults={
            "reuse_cached_answers": bool(reuse_cached_answers),
            "updated_at": timezone.now(),
        },
    )
    return preference
