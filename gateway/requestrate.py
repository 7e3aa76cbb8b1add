"""API requests per minute: a limit per user (all their keys) and per API key, beside
the token limits of :mod:`gateway.quota`, from the user's plan
(``Plan.requests_per_minute``, ``Plan.key_requests_per_minute``; None: no limit).

Fixed UTC-minute windows, counted in one Redis Lua script: both counters are checked
first and both charged only when both have room, so a refused request counts nowhere
and concurrent requests can never together pass a limit. Every API request counts
(``/v1/models`` too), refused or not by later checks. A chat completion's request
is counted in its token reservation's script (:class:`RequestCounter`), one round trip
for both. The keys are in :mod:`inference.keys`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, cast

from chatsite.errors import QuotaExceeded
from gateway.quota_lua import RPM_COUNT_FN
from inference import keys
from inference.connections import redis_sync

CODE = "rate_limit_requests"
# KEYS: user counter, key counter (one slot: the user's). ARGV: user limit, key limit
# (-1: none), TTL (s). Replies as RPM_COUNT_FN's rpm_count.
_COUNT_LUA = RPM_COUNT_FN + "return rpm_count(0, ARGV[1], ARGV[2], ARGV[3])"


@dataclass(frozen=True)
class RequestCount:
    """The counts after one admitted request: ``limit`` and ``remaining`` of the
    tighter of the two windows (None: neither has a limit), ``reset_s`` seconds to the
    minute's end."""

    limit: int | None
    remaining: int | None
    reset_s: int

    def headers(self) -> dict[str, str]:
        """OpenAI's ``x-ratelimit-*-requests`` headers (none without a limit)."""
        if self.limit is None or self.remaining is None:
            return {}
        return {
            "x-ratelimit-limit-requests": str(self.limit),
            "x-ratelimit-remaining-requests": str(self.remaining),
            "x-ratelimit-reset-requests": f"{self.reset_s}s",
        }


@dataclass
class RequestCounter:
    """One API request to count against its user's and its key's requests per UTC
    minute (``user_limit``, ``key_limit``; None: no limit; ``key_id`` None: no key
    window), counted once: by :meth:`count`, or by the token reservation's own script
    (:func:`gateway.quota.quota_reserve` with ``count``), which saves a round trip.
    ``now``: the epoch s it counts at (None: the time it is counted); ``counted``
    holds the result once counted (None: not yet), ``refused`` the 429 of a request
    over its limit (raised again by :meth:`count`, without Redis)."""

    user_id: int
    key_id: int | None
    user_limit: int | None
    key_limit: int | None
    now: float | None = None
    counted: RequestCount | None = None
    refused: QuotaExceeded | None = None

    def at(self) -> float:
        """The epoch s the request counts at (fixed on first use)."""
        if self.now is None:
            self.now = time.time()
        return self.now

    def count(self) -> RequestCount:
        """Count the request now unless it was counted; return its RequestCount.

        Raises QuotaExceeded (as :func:`request_count`); nothing is counted then.
        """
        if self.refused is not None:
            raise self.refused
        if self.counted is None and not self.limited():
            reset_s = _reset_s(self.at())
            self.counted = RequestCount(limit=None, remaining=None, reset_s=reset_s)
        if self.counted is None:
            script = cast(Any, redis_sync()).register_script(_COUNT_LUA)
            script_keys, args = self.script_keys_args()
            return self.script_reply(script(keys=script_keys, args=args))
        return self.counted

    def limited(self) -> bool:
        """True when a limit applies (else counting needs no Redis)."""
        return self.user_limit is not None or self.key_limit is not None

    def uncounted(self) -> bool:
        """True when the request is still to be counted in Redis (a request without
        limits is counted here, without Redis)."""
        if self.counted is None and not self.limited():
            self.count()
        return self.counted is None

    def script_keys_args(self) -> tuple[list[str], list[Any]]:
        """The KEYS and ARGV of RPM_COUNT_FN's ``rpm_count``: the two counters of the
        request's minute, then the two limits (-1: none) and the TTL (s)."""
        now = self.at()
        minute = int(now // 60)
        return (
            [
                keys.rpm_user_key(self.user_id, minute),
                keys.rpm_key_key(self.user_id, self.key_id or 0, minute),
            ],
            [
                -1 if self.user_limit is None else self.user_limit,
                -1 if self.key_limit is None or self.key_id is None else self.key_limit,
                _reset_s(now) + 60,
            ],
        )

    def script_reply(self, reply: list[Any]) -> RequestCount:
        """Apply ``rpm_count``'s reply (``[1, user count, key count]`` or ``[0, 1|2,
        count]``): record and return the count, or raise QuotaExceeded (429
        ``rate_limit_requests``) for a refusal."""
        reset_s = _reset_s(self.at())
        if int(reply[0]) == 0:
            which = int(reply[1])
            self.refused = _refused(
                which="your account" if which == 1 else "this API key",
                limit=self.user_limit if which == 1 else self.key_limit,
                reset_s=reset_s,
            )
            raise self.refused
        spare = []
        if self.user_limit is not None:
            spare.append((self.user_limit - int(reply[1]), self.user_limit))
        if self.key_limit is not None and self.key_id is not None:
            spare.append((self.key_limit - int(reply[2]), self.key_limit))
        remaining, limit = min(spare) if spare else (None, None)
        self.counted = RequestCount(limit=limit, remaining=remaining, reset_s=reset_s)
        return self.counted

    def reserve_reply(self, reply: list[Any]) -> list[Any]:
        """Apply the reply of ``RESERVE_COUNTED_LUA`` (:mod:`gateway.quota_lua`):
        raise the 429 of ``[-2, 1|2, count]`` (QuotaExceeded), else record the count
        (its last two items) and return the reservation's own reply."""
        if int(reply[0]) == -2:
            self.script_reply([0, *reply[1:]])  # raises
        self.script_reply([1, *reply[-2:]])
        return reply[:-2]


def _reset_s(now: float) -> int:
    """Seconds from ``now`` (epoch s) to the end of its UTC minute (at least 1)."""
    return max(1, 60 - int(now % 60))


def _refused(*, which: str, limit: int | None, reset_s: int) -> QuotaExceeded:
    return QuotaExceeded(
        f"Too many API requests: {which} may make {limit} per minute. "
        f"Please wait {reset_s} seconds and try again.",
        code=CODE,
        retry_after_s=reset_s,
        headers={
            "x-ratelimit-limit-requests": str(limit),
            "x-ratelimit-remaining-requests": "0",
            "x-ratelimit-reset-requests": f"{reset_s}s",
        },
    )


def request_count(
    *,
    user_id: int,
    key_id: int | None,
    user_limit: int | None,
    key_limit: int | None,
    now: float | None = None,
) -> RequestCount:
    """Count one API request of ``user_id`` made with the API key ``key_id``.

    Limits are requests per UTC minute (None: none). Raises QuotaExceeded (429
    ``rate_limit_requests``, Retry-After: seconds to the minute's end, and
    ``x-ratelimit-limit-requests`` / ``-remaining-requests`` / ``-reset-requests``)
    when the user's or the key's limit is reached; nothing is counted then.
    """
    return RequestCounter(
        user_id=user_id,
        key_id=key_id,
        user_limit=user_limit,
        key_limit=key_limit,
        now=time.time() if now is None else now,
    ).count()
