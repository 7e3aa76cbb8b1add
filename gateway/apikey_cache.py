"""A per-process cache of API key lookups, keyed by the key's SHA-256.

Authenticating an API request is one query (the key, its user, their subscription and
whether a suspension is in force; :func:`gateway.services.api_key_authenticate`);
compiling and running it through the ORM is the largest cost of admitting a request.
Its answer is kept here for GATEWAY_API_KEY_CACHE_S seconds (0: not cached).

Bound: a change made anywhere (a key revoked, a user deactivated or suspended, a
subscription moved to another plan) applies on every process within
GATEWAY_API_KEY_CACHE_S seconds; a key revoked through
:func:`gateway.services.api_key_revoke` stops working at once on the process that
revoked it (:func:`apikey_forget`). A plan's own limits and pools come from
:func:`gateway.selectors.gateway_config` (GATEWAY_CONFIG_CACHE_S).

Entries are immutable snapshots: each request gets its own copy of the user
(:func:`apikey_cached` returns a fresh instance), never a shared one. At most
GATEWAY_API_KEY_CACHE_ENTRIES keys are held; a full cache is emptied (the next
requests query again).
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass
from typing import Any

from django.conf import settings


@dataclass(frozen=True)
class CachedKey:
    """What one lookup found: the key row (with its user and subscription loaded),
    whether the user was suspended, and when it was loaded (monotonic s)."""

    key: Any  # gateway.models.ApiKey
    suspended: bool
    loaded_at: float


_entries: dict[str, CachedKey] = {}


def apikey_cached(key_hash: str) -> tuple[Any, Any, bool] | None:
    """Return ``(key, user copy, suspended)`` for ``key_hash`` when a lookup younger
    than GATEWAY_API_KEY_CACHE_S seconds holds it, else None. ``key`` is shared: read
    it only (its ``last_used_at`` is updated with :func:`apikey_used`)."""
    ttl = settings.GATEWAY_API_KEY_CACHE_S
    entry = _entries.get(key_hash)
    if entry is None or ttl <= 0:
        return None
    if time.monotonic() - entry.loaded_at >= ttl:
        _entries.pop(key_hash, None)
        return None
    return entry.key, copy.copy(entry.key.user), entry.suspended


def apikey_remember(key_hash: str, *, key: Any, suspended: bool) -> None:
    """Keep the lookup of ``key_hash`` (an active key; nothing is kept when caching is
    off). ``key`` must not be changed after this call."""
    if settings.GATEWAY_API_KEY_CACHE_S <= 0:
        return
    if len(_entries) >= settings.GATEWAY_API_KEY_CACHE_ENTRIES:
        _entries.clear()
    kept = copy.copy(key)
    kept.user = copy.copy(key.user)  # the caller's user stays its own
    _entries[key_hash] = CachedKey(
        key=kept, suspended=suspended, loaded_at=time.monotonic()
    )


def apikey_used(key_hash: str, *, at: Any) -> None:
    """Note that the cached key ``key_hash`` was stamped used at ``at`` (a datetime),
    so it is not stamped again before API_KEY_LAST_USED_RESOLUTION_S."""
    entry = _entries.get(key_hash)
    if entry is not None:
        entry.key.last_used_at = at


def apikey_forget(key_hash: str | None = None) -> None:
    """Drop the lookup of ``key_hash`` (None: every lookup) from this process."""
    if key_hash is None:
        _entries.clear()
    else:
        _entries.pop(key_hash, None)
