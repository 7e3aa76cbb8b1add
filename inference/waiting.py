"""What the followers of one process ask about waiting generations, asked once for all.

Every open stream checks, about once a second while it is idle, whether its pool still
has a live worker (the watchdog) and, while its job waits, its place in the queue. With
thousands of streams a process asked Redis thousands of times a second the same few
questions (and hopped to a thread for each). Here an answer is per pool, shared by all
followers on the event loop for up to a second:

- :func:`aworkers_live`: one ZCOUNT per pool per second;
- :func:`aqueue_position_shared`: one Lua call per pool per second lists the waiting
  jobs; each follower looks its own up (:func:`aqueue_position` asks at once);
- :func:`agen_watchdog`: the watchdog's rules
  (:func:`inference.watchdog.generation_watchdog`) on the event loop, with no Redis
  call at all until a deadline passed.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections.abc import Callable, Coroutine
from typing import Any

from inference import keys, protocol
from inference.client import generation_fail_on
from inference.connections import redis_async
from inference.liveness import workers_live_on
from inference.watchdog import WATCHDOG_MESSAGES, Watch

# How many waiting entries a queue-position scan reads at most: admission control
# keeps a pool's queue short, so a longer queue is reported as "more than this"
# (aqueue_position).
QUEUE_POSITION_SCAN_MAX = 500

# How long one pool's answer (liveness, waiting jobs) is reused by every follower of
# an event loop (s): the followers ask about once a second (their idle tick).
SHARED_ANSWER_S = 1.0

_answers: weakref.WeakKeyDictionary[
    asyncio.AbstractEventLoop, dict[tuple[str, str], tuple[float, asyncio.Task[Any]]]
] = weakref.WeakKeyDictionary()


async def _shared(
    what: str, pool: str, ask: Callable[[], Coroutine[Any, Any, Any]], max_age_s: float
) -> Any:
    """Return ``ask()``'s answer for (``what``, ``pool``), asking at most once per
    ``max_age_s`` seconds on this event loop; concurrent callers share one pending
    ask, and a failed ask is not reused."""
    loop = asyncio.get_running_loop()
    per_loop = _answers.setdefault(loop, {})
    cached = per_loop.get((what, pool))
    if cached is None or loop.time() - cached[0] > max_age_s:
        cached = per_loop[(what, pool)] = (loop.time(), loop.create_task(ask()))
    try:
        # shield: one caller leaving (cancelled) must not cancel the others' answer
        return await asyncio.shield(cached[1])
    except Exception:
        if per_loop.get((what, pool)) is cached:
            del per_loop[(what, pool)]
        raise


async def aworkers_live(*, pool: str, max_age_s: float = SHARED_ANSWER_S) -> int:
    """Return how many workers of ``pool`` are live
    (:func:`inference.liveness.workers_live_on`), an answer at most ``max_age_s``
    seconds old."""

    async def ask() -> int:
        return int(await workers_live_on(redis_async(), pool=pool))

    return await _shared("live", pool, ask, max_age_s)


# The job ids of the first ARGV[2] entries of a pool's queue that wait for a worker
# (after the group's last-delivered id: entries up to it were handed to a worker), then
# "1" if more wait, else "0". KEYS = queue stream; ARGV = consumer group, cap.
_WAITING_LUA = """
if redis.call('EXISTS', KEYS[1]) == 0 then return {'0'} end
local last = '-'
for _, g in ipairs(redis.call('XINFO', 'GROUPS', KEYS[1])) do
  local name, delivered
  for i = 1, #g, 2 do
    if g[i] == 'name' then name = g[i + 1] end
    if g[i] == 'last-delivered-id' then delivered = g[i + 1] end
  end
  if name == ARGV[1] then last = delivered end
end
local cap = tonumber(ARGV[2])
local ids = {}
local more = '0'
for _, e in ipairs(redis.call('XRANGE', KEYS[1], last, '+', 'COUNT', cap + 2)) do
  if e[1] ~= last then
    if #ids >= cap then more = '1'; break end
    local id = ''
    local f = e[2]
    for i = 1, #f, 2 do
      if f[i] == 'job' then id = string.match(f[i + 1], '^{"job_id": "([^"]*)"') or '' end
    end
    ids[#ids + 1] = id
  end
end
ids[#ids + 1] = more
return ids
"""


async def _waiting_jobs(pool: str) -> tuple[dict[str, int], bool]:
    """One Lua call: ``({job id: place (1 = next)}, more wait past the scan)`` for the
    first QUEUE_POSITION_SCAN_MAX jobs that wait in ``pool``'s queue."""
    reply = await redis_async().eval(
        _WAITING_LUA, 1, keys.queue_key(pool), protocol.GROUP,
        QUEUE_POSITION_SCAN_MAX,
    )  # fmt: skip
    *ids, more = reply
    return {job: place for place, job in enumerate(ids, 1) if job}, more == "1"


def _place(waiting: tuple[dict[str, int], bool], job_id: str) -> int:
    positions, more = waiting
    return positions.get(job_id) or (QUEUE_POSITION_SCAN_MAX + 1 if more else 0)


async def aqueue_position(*, pool: str, job_id: str) -> int:
    """Return where ``job_id`` waits in ``pool``'s queue now: 1 = the next job a worker
    takes, 0 = not waiting (a worker took it, or it is not queued), and
    QUEUE_POSITION_SCAN_MAX + 1 for any place further back. One Lua call that reads
    only the waiting entries, up to QUEUE_POSITION_SCAN_MAX of them."""
    return _place(await _waiting_jobs(pool), job_id)


async def aqueue_position_shared(
    *, pool: str, job_id: str, max_age_s: float = SHARED_ANSWER_S
) -> int:
    """Return :func:`aqueue_position` from a list of the pool's waiting jobs at most
    ``max_age_s`` seconds old that all followers of the loop share."""
    waiting = await _shared("waiting", pool, lambda: _waiting_jobs(pool), max_age_s)
    return _place(waiting, job_id)


async def agen_watchdog(
    watch: Watch, *, started: bool, last_event_at: float
) -> str | None:
    """:func:`inference.watchdog.generation_watchdog` on the event loop: the same rules
    (:meth:`Watch.due`) and result (the error code written, or None), with no Redis
    call until a deadline passed, and then the pool's shared liveness
    (:func:`aworkers_live`). ``last_event_at`` is epoch seconds."""
    code = watch.due(now=time.time(), started=started, last_event_at=last_event_at)
    if code is None or (
        code == protocol.ERROR_NO_WORKER and await aworkers_live(pool=watch.pool)
    ):
        return None
    written, _cancelled = await generation_fail_on(
        redis_async(), job_id=watch.job_id, code=code, message=WATCHDOG_MESSAGES[code]
    )
    return code if written else None
