"""Reset a user's token quota windows at once (the admin's and ``reset_quota``'s action).

Kept apart from :mod:`gateway.quota` (reserve and settle on every request), which it
builds on: the same window counters and reservation hashes (``inference.keys``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import cast

from gateway.quota import Limits, quota_windows
from inference import keys
from inference.connections import redis_sync

# KEYS: the user's 3 current window counters, the user's reservation set, then the
# reservation hash of each job in it (one slot: the user's). ARGV: 3 TTLs (s), then the
# job id of each hash. Sets each counter to the tokens still reserved against it by
# unsettled reservations (their hashes name the counters they charged), so a later
# settlement's (actual - reserved) lands on the amount it was reserved against: the
# counter ends at exactly the actual usage of those requests. Returns {-1} when the set
# no longer holds exactly the jobs given (a reservation was made or settled since it
# was read: read it again), else {before1, before2, before3, after1, after2, after3}.
_RESET_LUA = """
local n = #KEYS - 4
if redis.call('ZCARD', KEYS[4]) ~= n then return {-1} end
for j = 1, n do
  if not redis.call('ZSCORE', KEYS[4], ARGV[3 + j]) then return {-1} end
end
local held = {0, 0, 0}
for j = 1, n do
  local f = redis.call('HMGET', KEYS[4 + j], 'amount', 'k1', 'k2', 'k3')
  if f[1] then
    for i = 1, 3 do
      if f[i + 1] == KEYS[i] then held[i] = held[i] + tonumber(f[1]) end
    end
  else
    redis.call('ZREM', KEYS[4], ARGV[3 + j])
  end
end
local out = {}
for i = 1, 3 do
  out[i] = tonumber(redis.call('GET', KEYS[i]) or '0')
  redis.call('SET', KEYS[i], held[i], 'EX', ARGV[i])
  out[3 + i] = held[i]
end
return out
"""
# How many times a reset reads the reservation set again when it changed meanwhile.
_RESET_TRIES = 20


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
    the current time). Cost: a read of the user's reservations; raises RuntimeError
    when they changed under it more than _RESET_TRIES times in a row.
    """
    now = time.time() if now is None else now
    # only the windows' keys and reset times are used (one extra MGET: an admin action)
    windows = quota_windows(user_id=user_id, limits=Limits(), now=now)
    client = redis_sync()
    held = keys.reservations_key(user_id)
    for _ in range(_RESET_TRIES):
        job_ids = cast(list[str], client.zrange(held, 0, -1))
        result = client.eval(
            _RESET_LUA,
            4 + len(job_ids),
            *[w.key for w in windows],
            held,
            *[keys.reservation_key(user_id, job_id) for job_id in job_ids],
            *[int(w.resets_at - now) + 60 for w in windows],
            *job_ids,
        )
        if int(result[0]) >= 0:
            break
    else:
        raise RuntimeError(f"quota reset of user {user_id}: reservations kept changing")
    values = [int(v) for v in result]
    return [
        QuotaReset(w.name, before, after)
        for w, before, after in zip(windows, values[:3], values[3:], strict=True)
    ]
