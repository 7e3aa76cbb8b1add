"""The Lua scripts of :mod:`gateway.quota` (reserve, settle) and of
:mod:`gateway.requestrate` (requests per minute), run with EVAL.

Every key a script touches is passed in KEYS and carries the user's hash tag
(:mod:`inference.keys`), so each runs on one Redis Cluster slot.
"""

# KEYS: 3 window counters, reservation hash, the user's reservation set (one slot: the
# user's). ARGV: amount, 3 limits (-1: none), 3 TTLs (s), reservation TTL (s), now
# (epoch s), job id, and "1" to check first that the day and month counters exist.
# Returns {1, used1, used2, used3} after charging, {0, window index (1-based), used in
# that window} when a limit would be passed, or {-1, absent} (bit 1: day, bit 2: month)
# when a checked counter is absent: nothing is charged then.
RESERVE_LUA = """
if ARGV[11] == '1' then
  local absent = 0
  if redis.call('EXISTS', KEYS[2]) == 0 then absent = absent + 1 end
  if redis.call('EXISTS', KEYS[3]) == 0 then absent = absent + 2 end
  if absent > 0 then return {-1, absent} end
end
local amount = tonumber(ARGV[1])
local used = {}
for i = 1, 3 do
  used[i] = tonumber(redis.call('GET', KEYS[i]) or '0')
  local limit = tonumber(ARGV[1 + i])
  if limit >= 0 and used[i] + amount > limit then
    return {0, i, used[i]}
  end
end
for i = 1, 3 do
  used[i] = redis.call('INCRBY', KEYS[i], amount)
  redis.call('EXPIRE', KEYS[i], ARGV[4 + i])
end
redis.call('HSET', KEYS[4], 'amount', amount, 'k1', KEYS[1], 'k2', KEYS[2], 'k3', KEYS[3])
redis.call('EXPIRE', KEYS[4], ARGV[8])
redis.call('ZREMRANGEBYSCORE', KEYS[5], '-inf', tonumber(ARGV[9]) - tonumber(ARGV[8]))
redis.call('ZADD', KEYS[5], ARGV[9], ARGV[10])
redis.call('EXPIRE', KEYS[5], ARGV[8])
return {1, used[1], used[2], used[3]}
"""

# A Lua function: count one API request in a user's and a key's UTC-minute counters
# (KEYS[k + 1], KEYS[k + 2]), limits lu, lk (-1: none), TTL ttl (s). Both are checked
# first and both counted only when both have room. Returns {1, user count, key count}
# after counting, or {0, 1|2, count}: the user's (1) or the key's (2) limit is
# reached and nothing was counted.
RPM_COUNT_FN = """
local function rpm_count(k, lu, lk, ttl)
  local limits = {tonumber(lu), tonumber(lk)}
  for i = 1, 2 do
    local used = tonumber(redis.call('GET', KEYS[k + i]) or '0')
    if limits[i] >= 0 and used + 1 > limits[i] then return {0, i, used} end
  end
  local counts = {}
  for i = 1, 2 do
    counts[i] = redis.call('INCR', KEYS[k + i])
    redis.call('EXPIRE', KEYS[k + i], ttl)
  end
  return {1, counts[1], counts[2]}
end
"""

# RESERVE_LUA preceded by the count of one API request (RPM_COUNT_FN), in one atomic
# script: KEYS as RESERVE_LUA's plus KEYS[6], KEYS[7] the user's and the key's
# request counters (the user's slot); ARGV as RESERVE_LUA's plus ARGV[12], ARGV[13]
# the request limits (-1: none) and ARGV[14] the counters' TTL (s). Returns {-2, 1|2,
# count} when a request limit is reached (nothing counted, nothing charged), else
# RESERVE_LUA's reply followed by the user's and the key's request counts (the
# request stays counted when the reservation is refused or must be seeded first).
RESERVE_COUNTED_LUA = (
    RPM_COUNT_FN
    + """
local counted = rpm_count(5, ARGV[12], ARGV[13], ARGV[14])
if counted[1] == 0 then return {-2, counted[2], counted[3]} end
local function reserve()
"""
    + RESERVE_LUA
    + """
end
local reply = reserve()
reply[#reply + 1] = counted[2]
reply[#reply + 1] = counted[3]
return reply
"""
)

# KEYS: reservation hash, the user's reservation set, the 3 window counters the hash
# names (one slot: the user's). ARGV: actual tokens, job id. Moves every window by
# (actual - reserved), never below zero, then deletes the reservation. Returns the
# reserved amount, or -1 if there was no reservation (already settled, or none made).
SETTLE_LUA = """
local amount = redis.call('HGET', KEYS[1], 'amount')
if not amount then return -1 end
local delta = tonumber(ARGV[1]) - tonumber(amount)
for i = 3, 5 do
  if redis.call('EXISTS', KEYS[i]) == 1 then
    local value = redis.call('INCRBY', KEYS[i], delta)
    if value < 0 then redis.call('SET', KEYS[i], 0, 'KEEPTTL') end
  end
end
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[2])
return tonumber(amount)
"""
