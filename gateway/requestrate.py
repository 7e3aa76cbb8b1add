"""API requests per minute: a limit per user (all their keys) and per API key, beside
the token limits of :mod:`gateway.quota`, from the user's plan
(``Plan.requests_per_minute``, ``Plan.key_requests_per_minute``; None: no limit).

Fixed UTC-minute windows, counted in one Redis Lua script: both counters are checked
first and both charged only when both have room, so a refused request counts nowhere
and concurrent requests can never together pass a limit. Every API request counts
(``/v1/models`` too), refused or not by later checks. The keys are in
:mod:`inference.keys`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, cast

from chatsite.errors import QuotaExceeded
from inference import keys
from inference.connections import redis_sync

CODE = "rate_limit_requests"
# KEYS: user counter, key counter (one slot: the user's). ARGV: user limit, key limit (-1: none), TTL (s).
# Returns {1, user count, key count} after counting, or {0, 1|2, count}: the user's
# (1) or the key's (2) limit is reached and nothing was counted.
_COUNT_LUA = """
for i = 1, 2 do
  local limit = tonumber(ARGV[i])
  local used = tonumber(redis.call('GET', KEYS[i]) or '0')
  if limit >= 0 and used + 1 > limit then return {0, i, used} end
end
local counts = {}
for i = 1, 2 do
  counts[i] = redis.call('INCR', KEYS[i])
  redis.call('EXPIRE', KEYS[i], ARGV[3])
end
return {1, counts[1], counts[2]}
"""


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
    now = time.time() if now is None else now
    minute = int(now // 60)
    reset_s = max(1, 60 - int(now % 60))
    if user_limit is None and key_limit is None:
        return RequestCount(limit=None, remaining=None, reset_s=reset_s)
    script = cast(Any, redis_sync()).register_script(_COUNT_LUA)
    result = script(
        keys=[
            keys.rpm_user_key(user_id, minute),
            keys.rpm_key_key(user_id, key_id or 0, minute),
        ],
        args=[
            -1 if user_limit is None else user_limit,
            -1 if key_limit is None or key_id is None else key_limit,
            reset_s + 60,
        ],
    )
    if int(result[0]) == 0:
        which = "your account" if int(result[1]) == 1 else "this API key"
        limit = user_limit if int(result[1]) == 1 else key_limit
        raise QuotaExceeded(
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
    spare = []
    if user_limit is not None:
        spare.append((user_limit - int(result[1]), user_limit))
    if key_limit is not None and key_id is not None:
        spare.append((key_limit - int(result[2]), key_limit))
    remaining, limit = min(spare) if spare else (None, None)
    return RequestCount(limit=limit, remaining=remaining, reset_s=reset_s)
