"""Request-rate limits (django-ratelimit 4.1, sync views only) read at request time.

The rates are settings ("count/period", e.g. ``30/m``); django-ratelimit calls these
functions with ``(group, request)`` on every request, so a changed setting applies
without a restart and no setting is read at import time.

Early refusal. django-ratelimit decides inside the view, so
a refused chat message still paid the whole site middleware chain first: the session
and the user read from PostgreSQL, CSRF, two hops to a sync thread. Under a one-user
flood (1,000 POSTs in 10 s) that work took the web process's CPU from every other
user. So when the library refuses a message POST, :func:`refusal_remember` marks the
request's session as refused in Redis until the library's window ends, and the ASGI
router (``chatsite/asgi.py``) asks :func:`arefusal_check` before Django runs: a marked
session's next message POSTs are answered with the same 429 after one Redis round trip,
touching neither the database nor the middleware. The library stays the one that
counts and decides; the mark only repeats its answer until its window turns.
"""

from __future__ import annotations

import hashlib
import logging
import math
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.http import HttpRequest
from django.http.cookie import parse_cookie
from django.http.response import HttpResponseBase
from django.urls import Resolver404, get_resolver
from django.utils.deprecation import MiddlewareMixin
from django_ratelimit.core import get_usage
from django_ratelimit.decorators import ratelimit
from django_ratelimit.middleware import (
    RatelimitMiddleware as _LibraryRatelimitMiddleware,
)
from redis.exceptions import RedisError

from chatsite.errors import QuotaExceeded
from inference import keys
from inference.connections import redis_async, redis_sync

logger = logging.getLogger(__name__)

_PERIOD_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}

# django-ratelimit's group of the chat's message POSTs (send, edit, regenerate): one
# CHAT_MESSAGE_RATE budget per user across them.
MESSAGE_GROUP = "chat-message"
# The attribute :func:`message_ratelimit` sets on a view (functools.wraps carries it
# through the decorators above it) so the router can tell a limited path from its view.
GROUP_ATTR = "ratelimit_group"
# Redis key prefix of the refusal marks: ``<prefix>:<group>:<sha256 of session key>``.


def message_rate(group: str, request: HttpRequest) -> str:
    """Rate of chat message POSTs per user (CHAT_MESSAGE_RATE)."""
    return settings.CHAT_MESSAGE_RATE


def message_ratelimit(
    view: Callable[..., HttpResponseBase],
) -> Callable[..., HttpResponseBase]:
    """Limit ``view`` to CHAT_MESSAGE_RATE per user (django-ratelimit, group
    :data:`MESSAGE_GROUP`) and mark it, so that a session refused there is refused at
    the ASGI router until the window ends (see the module docstring)."""
    limited = ratelimit(key="user", rate=message_rate, group=MESSAGE_GROUP)(view)
    setattr(limited, GROUP_ATTR, MESSAGE_GROUP)
    return limited


def login_rate(group: str, request: HttpRequest) -> str:
    """Rate of login POSTs per client IP (LOGIN_RATE)."""
    return settings.LOGIN_RATE


_PERIOD_WORDS = {"s": "second", "m": "minute", "h": "hour", "d": "day"}


def rate_describe(rate: str) -> str:
    """Return a ``count/period`` rate in words for a message (``"30/m"`` -> "30 per
    minute", ``"10/5m"`` -> "10 per 5 minutes")."""
    count, _, period = rate.partition("/")
    digits = "".join(c for c in period if c.isdigit())
    word = _PERIOD_WORDS.get((period[len(digits) :] or "s")[0].lower(), "second")
    if digits and int(digits) != 1:
        return f"{count} per {digits} {word}s"
    return f"{count} per {word}"


def rate_period_s(rate: str) -> int:
    """Return the period of a ``count/period`` rate in seconds (``"10/5m"`` -> 300)."""
    period = rate.split("/", 1)[1] if "/" in rate else "s"
    digits = "".join(c for c in period if c.isdigit())
    unit = (period[len(digits) :] or "s")[0].lower()
    return int(digits or 1) * _PERIOD_S.get(unit, 1)


class RatelimitMiddleware(MiddlewareMixin):
    """django-ratelimit's middleware (answers ``Ratelimited`` with RATELIMIT_VIEW), made
    async-capable.

    django-ratelimit 4.1's own middleware is sync-only, so under ASGI Django ran every
    request's view through an extra sync thread and back (``AsyncToSync``), about a
    millisecond per request, and a non-streaming API request held that thread for its
    whole answer. :class:`MiddlewareMixin` runs in either mode; the exception handling
    is the library's own.
    """

    process_exception = _LibraryRatelimitMiddleware.process_exception


def message_refusal() -> QuotaExceeded:
    """The error of a refused message POST (429, ``rate_limited``, Retry-After: the
    rate's whole period, the longest a client may have to wait)."""
    rate = settings.CHAT_MESSAGE_RATE
    retry_s = rate_period_s(rate)
    return QuotaExceeded(
        f"Too many messages (the limit is {rate_describe(rate)}). "
        f"Please wait up to {retry_s} seconds and try again.",
        code="rate_limited",
        retry_after_s=retry_s,
    )


def refused_key(*, group: str, session_key: str) -> str:
    """The Redis key marking ``session_key`` refused in ``group`` (the session key is
    hashed: Redis never holds a usable session id)."""
    digest = hashlib.sha256(session_key.encode()).hexdigest()
    return keys.ratelimit_refused_key(group, digest)


def view_group(view: Any) -> str | None:
    """The early-refusal group of a resolved view (set by :func:`message_ratelimit`)."""
    return getattr(view, GROUP_ATTR, None)


def refusal_remember(*, request: HttpRequest) -> int:
    """Mark ``request``'s session refused for the rest of django-ratelimit's window;
    return the seconds marked (0: nothing marked).

    Call when the library refused ``request`` (RATELIMIT_VIEW). Only views of
    :func:`message_ratelimit` with a session are marked; the window's end is the
    library's own (``get_usage(..., increment=False)["time_left"]``, seconds), so the
    mark never outlives the refusal the library would give. A Redis failure marks
    nothing (the library answers every request then, as before).
    """
    match = request.resolver_match
    group = view_group(match.func) if match is not None else None
    session_key = getattr(getattr(request, "session", None), "session_key", None)
    if group != MESSAGE_GROUP or not session_key:
        return 0
    try:
        usage = get_usage(
            request, group=group, key="user", rate=message_rate, increment=False
        )
        seconds = int(usage["time_left"]) if usage else 0
        if seconds > 0:
            redis_sync().set(
                refused_key(group=group, session_key=session_key), 1, ex=seconds
            )
    except RedisError:
        logger.warning("rate limit: could not mark a refused session", exc_info=True)
        return 0
    return max(seconds, 0)


_UNRESOLVED: Any = object()


async def arefusal_check(
    scope: dict[str, Any], match: Any = _UNRESOLVED
) -> QuotaExceeded | None:
    """Return the refusal of an HTTP request before Django runs, or None to serve it.

    Refused: a POST to a :func:`message_ratelimit` view whose session cookie is marked
    by :func:`refusal_remember`. Costs a URL resolve (none when the caller passes the
    path's ``match``, a ResolverMatch, or None for no route) and, for a POST to such a
    path with a session cookie, one Redis round trip (PEXISTS-like ``EXISTS``); no
    database. A Redis failure serves the request (django-ratelimit still decides).
    """
    if scope.get("method") != "POST":
        return None
    if match is _UNRESOLVED:
        try:
            match = get_resolver().resolve(scope["path"])
        except Resolver404:
            return None
    if match is None:
        return None
    group = view_group(match.func)
    if group is None:
        return None
    cookies = b"; ".join(
        value for name, value in scope.get("headers", ()) if name == b"cookie"
    )
    session_key = parse_cookie(cookies.decode("latin-1")).get(
        settings.SESSION_COOKIE_NAME
    )
    if not session_key:
        return None
    try:
        marked = await redis_async().exists(
            refused_key(group=group, session_key=session_key)
        )
    except RedisError:
        return None
    return message_refusal() if marked else None


# --- the per-account sign-in lockout ----------------------------------------------------


def _account_digest(username: str) -> str:
    """The account's Redis id: the typed username, case-folded and hashed (Redis never
    holds the name; "Alice" and "alice" are one account, as sign-up keeps them)."""
    return hashlib.sha256(username.strip().casefold().encode()).hexdigest()


def login_locked_for(*, username: str) -> int:
    """Return the seconds the account ``username`` stays locked (0: not locked).

    The same for a name no account has: the answer never tells whether one exists.
    A Redis failure locks nothing (the per-IP LOGIN_RATE still applies).
    """
    try:
        ttl = int(redis_sync().ttl(keys.login_locked_key(_account_digest(username))))
    except RedisError:
        logger.warning("login lockout: Redis unavailable", exc_info=True)
        return 0
    return max(ttl, 0)


def login_failure_record(*, username: str) -> int:
    """Count a failed sign-in of ``username``; return the seconds it is now locked.

    From the LOGIN_ACCOUNT_FAILURES-th failure within LOGIN_FAILURE_WINDOW_S seconds
    on, each failure locks the account for LOGIN_LOCKOUT_BASE_S * 2^(failures - limit)
    seconds, at most LOGIN_LOCKOUT_MAX_S (back-off). One pipeline: INCR + EXPIRE, and
    SET ... EX when locking.
    """
    digest = _account_digest(username)
    key = keys.login_failures_key(digest)
    try:
        client = redis_sync()
        with client.pipeline() as pipe:
            pipe.incr(key)
            pipe.expire(key, settings.LOGIN_FAILURE_WINDOW_S)
            failures = int(pipe.execute()[0])
        over = failures - settings.LOGIN_ACCOUNT_FAILURES
        if over < 0:
            return 0
        seconds = min(
            settings.LOGIN_LOCKOUT_BASE_S * 2 ** min(over, 30),
            settings.LOGIN_LOCKOUT_MAX_S,
        )
        client.set(keys.login_locked_key(digest), 1, ex=seconds)
    except RedisError:
        logger.warning("login lockout: Redis unavailable", exc_info=True)
        return 0
    return int(seconds)


def login_failures_clear(*, username: str) -> None:
    """Forget the failed sign-ins of ``username`` (after a successful one)."""
    digest = _account_digest(username)
    try:
        redis_sync().delete(
            keys.login_failures_key(digest), keys.login_locked_key(digest)
        )
    except RedisError:
        logger.warning("login lockout: Redis unavailable", exc_info=True)


def login_lockout_message(seconds: int) -> str:
    """The sign-in form's error while an account is locked for ``seconds``; worded the
    same whether or not the account exists."""
    minutes = max(1, math.ceil(seconds / 60))
    return (
        "Too many failed sign-ins for this username. For your account's safety, "
        f"sign-in is paused for {minutes} minute{'s' if minutes != 1 else ''}; "
        "please try again then."
    )
