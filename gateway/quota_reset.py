"""Reset a user's token quota windows at once (the admin's and ``reset_quota``'s action).

Kept apart from :mod:`gateway.quota` (reserve and settle on every request), which it
builds on: the same window counters and reservation hashes (``gateway.keys``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from gateway import keys
from gateway.quota import Limits, quota_windows
from inference.connections import redis_sync

# KEYS: the user's 3 current window counters. ARGV: SCAN pattern of reservation hashes,
# 3 TTLs (s). Sets each counter to the tokens still reserved against it by unsettled
# reservations (their hashes name the counters they charged), so a later settlement's
# (actual - reserved) lands on the amount it was reserved against: the counter ends at
# exactly the actual usage of those requests. SCAN runs inside the script, so no
# reservation can be made or settled between the sum and the SET. Returns {before1,
# before2, before3, after1, after2, after3}.
_RESET_LUA = """
local held = {0, 0, 0}
local cursor = '0'
repeat
  local page = redis.call('SCAN', cursor, 'MATCH', ARGV[1], 'COUNT', 1000)
  cursor = page[1]
  for _, res in ipairs(page[2]) do
    local f = redis.call('HMGET', res, 'amount', 'k1', 'k2', 'k3')
    if f[1] then
      for i = 1, 3 do
        if f[i + 1] == KEYS[i] then held[i] = held[i] + tonumber(f[1]) end
      end
    end
  end
until cursor == '0'
local out = {}
for i = 1, 3 do
  out[i] = tonumber(redis.call('GET', KEYS[i]) or '0')
  redis.call('SET', KEYS[i], held[i], 'EX', ARGV[1 + i])
  out[3 + i] = held[i]
end
return out
"""


@dataclass(frozen=True)
class QuotaReset:
    """What :func:`quota_reset` did to one window: tokens counted before and after
    (after = the tokens still reserved by requests in flight)."""

    name: str
    before: int
    after: int


def quota_reset(*, user_id: int, now: float | None = None) -> list[QuotaReset]:
    """Give a user their whole budget back in the current minute, day and month windows.

    Each counter becomes the tokens still reserved against it by requests in flight
    (not zero), atomically with respect to reservations and settlements (one Lua
    script): when such a request settles, the counter moves by (actual - reserved) and
    so ends at its actual usage, and the windows stay consistent. The counters are
    written (not deleted), so the next request does not seed them again from the
    usage records (:func:`gateway.quota.quota_unseeded`); a Redis that loses its data is seeded
    from the records again, and the reset is lost with it. ``now``: epoch s (default:
    the current time). Cost: one SCAN of the reservation hashes (``gw:res:*``).
    """
    now = time.time() if now is None else now
    # only the windows' keys and reset times are used (one extra MGET: an admin action)
    windows = quota_windows(user_id=user_id, limits=Limits(), now=now)
    result = redis_sync().eval(
        _RESET_LUA,
        3,
        *[w.key for w in windows],
        keys.RESERVATION_KEY_PATTERN,
        *[int(w.resets_at - now) + 60 for w in windows],
    )
    values = [int(v) for v in result]
    return [
        QuotaReset(w.name, before, after)
        for w, before, after in zip(windows, values[:3], values[3:], strict=True)
    ]
