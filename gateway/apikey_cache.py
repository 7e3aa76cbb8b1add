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

Refresh ahead: a request that finds an entry older than half the bound
(:func:`apikey_cached` with ``refresh``) is answered from it, and the lookup is run
again on one background thread; its answer replaces the entry (stamped with the time
the lookup started, so the bound holds), or drops it when the key is no longer active.
A key in steady use is thus never looked up inline after its first request. A refresh
that fails leaves the entry to expire; one that finds the entry forgotten meanwhile
(:func:`apikey_forget`, e.g. a revocation) or replaced keeps nothing.

Entries are immutable snapshots: each request gets its own copy of the user
(:func:`apikey_cached` returns a fresh instance), never a shared one. At most
GATEWAY_API_KEY_CACHE_ENTRIES keys are held; a full cache is emptied (the next
requests query again).
"""

from __future__ import annotations

import copy
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
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


# A refresh's lookup: ``(key, suspended)`` of an active key, or None (no longer active).
Lookup = Callable[[], "tuple[Any, bool] | None"]

logger = logging.getLogger(__name__)

_entries: dict[str, CachedKey] = {}
_refreshing: set[str] = set()
_lock = threading.Lock()  # a refresh's check-and-replace against apikey_forget
_refresher: ThreadPoolExecutor | None = None


def apikey_cached(
    key_hash: str, *, refresh: Lookup | None = None
) -> tuple[Any, Any, bool] | None:
    """Return ``(key, user copy, suspended)`` for ``key_hash`` when a lookup younger
    than GATEWAY_API_KEY_CACHE_S seconds holds it, else None. ``key`` is shared: read
    it only (its ``last_used_at`` is updated with :func:`apikey_used`).

    ``refresh``: the lookup to run in the background when the entry is older than
    half the bound (one at a time per key; see the module docstring).
    """
    ttl = settings.GATEWAY_API_KEY_CACHE_S
    entry = _entries.get(key_hash)
    if entry is None or ttl <= 0:
        return None
    age = time.monotonic() - entry.loaded_at
    if age >= ttl:
        _entries.pop(key_hash, None)
        return None
    if refresh is not None and age >= ttl / 2 and key_hash not in _refreshing:
        _refreshing.add(key_hash)
        _refresh_executor().submit(_refresh, key_hash, entry, refresh)
    return entry.key, copy.copy(entry.key.user), entry.suspended


def apikey_refreshing(key_hash: str) -> bool:
    """Whether a background refresh of ``key_hash`` is under way."""
    return key_hash in _refreshing


def _refresh_executor() -> ThreadPoolExecutor:
    global _refresher
    with _lock:
        if _refresher is None:
            _refresher = ThreadPoolExecutor(
                max_workers=1, thread_name_prefix="apikey-refresh"
            )
    return _refresher


def _refresh(key_hash: str, entry: CachedKey, lookup: Lookup) -> None:
    """Run ``lookup`` and replace ``entry`` with its answer (drop it for None),
    unless the entry was forgotten or replaced meanwhile."""
    try:
        started = time.monotonic()
        try:
            found = lookup()
        except Exception:
            logger.exception("API key cache refresh failed (the entry expires)")
            return
        with _lock:
            if _entries.get(key_hash) is not entry:
                return
            if found is None:
                _entries.pop(key_hash, None)
            else:
                key, suspended = found
                _entries[key_hash] = _snapshot(key, suspended, loaded_at=started)
    finally:
        _refreshing.discard(key_hash)


def _snapshot(key: Any, suspended: bool, *, loaded_at: float) -> CachedKey:
    kept = copy.copy(key)
    kept.user = copy.copy(key.user)  # the caller's user stays its own
    return CachedKey(key=kept, suspended=suspended, loaded_at=loaded_at)


def apikey_remember(key_hash: str, *, key: Any, suspended: bool) -> None:
    """Keep the lookup of ``key_hash`` (an active key; nothing is kept when caching is
    off). ``key`` must not be changed after this call."""
    if settings.GATEWAY_API_KEY_CACHE_S <= 0:
        return
    if len(_entries) >= settings.GATEWAY_API_KEY_CACHE_ENTRIES:
        _entries.clear()
    _entries[key_hash] = _snapshot(key, suspended, loaded_at=time.monotonic())


def apikey_used(key_hash: str, *, at: Any) -> None:
    """Note that the cached key ``key_hash`` was stamped used at ``at`` (a datetime),
    so it is not stamped again before API_KEY_LAST_USED_RESOLUTION_S."""
    entry = _entries.get(key_hash)
    if entry is not None:
        entry.key.last_used_at = at


def apikey_forget(key_hash: str | None = None) -> None:
    """Drop the lookup of ``key_hash`` (None: every lookup) from this process; a
    refresh under way keeps nothing."""
    with _lock:
        if key_hash is None:
            _entries.clear()
        else:
            _entries.pop(key_hash, None)
