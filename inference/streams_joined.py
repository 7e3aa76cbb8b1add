"""The stream hub's joined read: one read-only script for a busy round of the hub.

:data:`JOINED_READ_LUA` reads every followed stream (``XREAD COUNT`` per key, no block)
and returns, on each key asked to join, each run of consecutive token entries as one
item ``[last id, token count, bodies joined]``, any other entry as XREAD returns it
(``[id, [name, value, ...]]``);
:func:`joined_args` builds its KEYS and ARGV from the hub's subscriptions and
:func:`joined_events` decodes a stream's items into :class:`protocol.Event` objects (a
run: :func:`inference.protocol_runs.event_parse_run`, ``tokens`` its entries).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from inference import protocol, protocol_runs, redis_types

if TYPE_CHECKING:
    from inference.streams_subscription import Subscription

# The joined read. ARGV: COUNT, the token event's type, the head and tail of a token's
# data (protocol.TOKEN_HEAD/TAIL), then per KEYS[i] its id and "1" to join its tokens.
# For each key, XREAD COUNT from its id; where joined, each run of consecutive token
# entries whose data is head + a JSON string body with no quote + tail comes back as
# ONE item ``[last id, token count, bodies joined]``; any other entry as XREAD returns
# it (``[id, fields]``). The reply has XREAD's shape (``[[key, items]...]``, keys with
# entries only). The web process then parses one string per stream and round where
# it parsed an entry (five strings and two lists) per token: the per-token work moves
# to Redis, which holds the entries. A script cannot block, so the hub runs it only
# after a round that returned entries (a busy process), else a blocking XREAD.
JOINED_READ_LUA = """#!lua flags=no-writes
local count, token, head, tail = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local out = {}
for i = 1, #KEYS do
  local r = redis.call('XREAD', 'COUNT', count, 'STREAMS', KEYS[i], ARGV[3 + 2 * i])
  if r then
    local entries = r[1][2]
    if ARGV[4 + 2 * i] == '1' then
      local items, parts, n, last = {}, {}, 0, nil
      for _, e in ipairs(entries) do
        local f = e[2]
        local body = nil
        if #f == 4 and f[1] == 'e' and f[2] == token and f[3] == 'd' then
          local d = f[4]
          if string.sub(d, 1, #head) == head and string.sub(d, -#tail) == tail then
            body = string.sub(d, #head + 1, -#tail - 1)
            if string.find(body, '"', 1, true) then body = nil end
          end
        end
        if body then
          n = n + 1
          parts[n] = body
          last = e[1]
        else
          if n > 0 then
            items[#items + 1] = {last, n, table.concat(parts)}
            parts, n = {}, 0
          end
          items[#items + 1] = e
        end
      end
      if n > 0 then items[#items + 1] = {last, n, table.concat(parts)} end
      entries = items
    end
    out[#out + 1] = {KEYS[i], entries}
  end
end
return out
"""


def joined_args(
    count: int,
    subs_of: dict[str, list[Subscription]],
    streams: redis_types.StreamOffsets,
    asked: dict[str, tuple[int, int]],
) -> tuple[list[str], list[Any]]:
    """The joined read's KEYS and ARGV for the round's ``streams`` (the wake-up
    stream left out: the script does not block). A key's tokens are joined only
    where every subscription is at the position asked: one behind it takes its
    entries one by one (:meth:`Subscription._deliver`). ``count``: the entries per
    key (XREAD's COUNT); ``subs_of``: the hub's subscriptions by key."""
    keys_: list[str] = []
    argv: list[Any] = [
        count,
        protocol.EVENT_TOKEN,
        protocol.TOKEN_HEAD,
        protocol.TOKEN_TAIL,
    ]
    for key, pos in asked.items():
        subs = subs_of.get(key)
        if not subs:
            continue
        same = len(subs) == 1 or all(sub._pos == pos for sub in subs)
        keys_.append(key)
        argv += [streams[key], "1" if same else "0"]
    return keys_, argv


def joined_events(entries: list[Any]) -> list[protocol.Event]:
    """Decode one stream's items of a :data:`JOINED_READ_LUA` reply, in order: an
    entry ``[id, [name, value, ...]]`` as :func:`protocol.event_parse_flat` does, a
    run ``[last id, token count, bodies joined]`` as one token Event."""
    return [
        protocol.event_parse_flat(entry[0], entry[1])
        if len(entry) == 2
        else protocol_runs.event_parse_run(entry[0], entry[1], entry[2])
        for entry in entries
    ]
