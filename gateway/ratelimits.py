"""Request-rate limits (django-ratelimit 4.1, sync views only) read at request time.

The rates are settings ("count/period", e.g. ``30/m``); django-ratelimit calls these
functions with ``(group, request)`` on every request, so a changed setting applies
without a restart and no setting is read at import time.
"""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest
from django.utils.deprecation import MiddlewareMixin
from django_ratelimit.middleware import (
    RatelimitMiddleware as _LibraryRatelimitMiddleware,
)

_PERIOD_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def message_rate(group: str, request: HttpRequest) -> str:
    """Rate of chat message POSTs per user (CHAT_MESSAGE_RATE)."""
    return settings.CHAT_MESSAGE_RATE


def login_rate(group: str, request: HttpRequest) -> str:
    """Rate of login POSTs per client IP (LOGIN_RATE)."""
    return settings.LOGIN_RATE


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
