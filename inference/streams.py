"""The stream hub: one reader per event loop for every generation stream it follows.

A web process follows thousands of generation streams at once (one per open answer).
Reading each with its own ``XREAD BLOCK`` held one pooled Redis connection and one
pending command per stream. The hub instead keeps, per running event loop, a single
reader task that blocks in ONE ``XREAD`` over every followed stream (XREAD takes many
keys) and hands the parsed events to the followers' :class:`Subscription` buffers:
no connection, thread or Redis command per stream.

- **Subscribing while the reader is blocked**: the XREAD also watches the hub's own
  wake-up stream (:func:`inference.keys.hub_wake_key`); a subscription made while
  the XREAD is pending appends one entry there (at most one per XREAD round), which
  ends the XREAD at once, and the next round includes the new stream.
- **Leaving**: :meth:`Subscription.close` only drops the subscription (no I/O), so it
  is safe in a ``finally`` of a cancelled task; ``CancelledError`` of a follower waiting
  in :meth:`Subscription.next` propagates untouched.
- **Redis errors**: a failed XREAD is retried every ERROR_BACKOFF_S with the
  subscriptions kept, so a blip (a restart, a failover, a dropped connection) costs
  the followers a pause, not their streams; only when reads keep failing for
  ERROR_GRACE_S does every current subscription fail (each follower gets a
  :class:`StreamReadError`, a ``RedisError``). One failed XREAD used to fail them all
  at once, including a follower that had subscribed a moment after the restart.
- **Resuming from an old id** (``Last-Event-ID``, a second tab): the XREAD asks each
  key from the lowest position among its subscriptions; each subscription gets only
  the entries after its own position.
- **Fairness**: ``COUNT`` caps the entries per key per round (XREAD's COUNT is per
  stream), so a client catching up on a long stream does not starve the others.
- **Holds**: while every follower waits out its coalescing pause (``Subscription.due``),
  no round starts before the first pause ends (a new subscription or a seek ends the
  wait): a lone stream is read per frame, not per token.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
import weakref
from typing import Any

import redis.asyncio as aioredis
from django.conf import settings
from redis.exceptions import RedisError, ResponseError

from inference import keys, protocol, protocol_runs, redis_types, streams_joined
from inference.connections import redis_async, redis_async_new
from inference.streams_subscription import Subscription, id_key, wake_waiter

logger = logging.getLogger(__name__)

# How long one XREAD of the hub blocks when nothing arrives (ms). New subscriptions do
# not wait for it (the wake-up stream ends the block), so it only sets how often an
# idle hub wakes: once a second.
HUB_BLOCK_MS = 1000
# Entries per stream per XREAD round: a token is one entry, so 256 is about 13 s of a
# stream at 20 ms per token, read in one round, while one client resuming a long
# answer cannot make a round carry thousands of entries of its stream alone.
HUB_COUNT = 256
# Rounds start at most this often (s). A round's cost grows with the followed streams
# (the XREAD names every key), not with the entries it returns: waiting up to 10 ms
# lets a round carry what every stream wrote meanwhile. Followers release frames every
# SSE_COALESCE_MS (50 ms), so the added delay is not seen (not measured apart).
HUB_MIN_ROUND_S = 0.01
# ... at HUB_FULL_PACE_KEYS followed streams; below, the pause shrinks in proportion,
# so a lightly loaded process does not hold an answer's first token for it (a turn's
# ``meta`` and first token come a millisecond or two apart; docs/benchmarks.md).
HUB_FULL_PACE_KEYS = 100
# ... and above, the pause grows in proportion too, up to HUB_MAX_ROUND_S: the reader's
# CPU stays about flat from 100 streams to thousands, where followers release frames
# every 50-200 ms anyway; at 500 streams and more a first token may wait up to 50 ms
# for its round (bench/results/2026-12-04-sse-profile.md).
HUB_MAX_ROUND_S = 0.05
# After a failed XREAD (Redis restarting), wait this long before the next one (s).
ERROR_BACKOFF_S = 0.2
# Reads failing for this long (s) fail the followers: Redis restarts in well under a
# second on a small data set, and a Sentinel failover takes a few seconds
# (down-after-milliseconds); past this the user is better told to retry.
ERROR_GRACE_S = 3.0
# The wake-up stream expires this long after its last entry (s): a hub that goes
# away leaves nothing behind.
WAKE_TTL_S = 60

_hubs: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, StreamHub]] = (
    weakref.WeakKeyDictionary()
)


def _raw(response: Any, **_options: Any) -> Any:
    return response


class StreamHub:
    """Reads every generation stream followed on one event loop with one XREAD.

    Use :func:`stream_hub` to get the running loop's hub. The reader task starts with
    the first subscription and ends once none is left (after its pending XREAD).
    """

    def __init__(
        self,
        *,
        url: str,
        block_ms: int = HUB_BLOCK_MS,
        count: int = HUB_COUNT,
        min_round_s: float = HUB_MIN_ROUND_S,
        full_pace_keys: int = HUB_FULL_PACE_KEYS,
        max_round_s: float = HUB_MAX_ROUND_S,
        error_grace_s: float = ERROR_GRACE_S,
        joined: bool = True,
    ) -> None:
        self.url = url
        self.joined = joined  # read busy rounds with JOINED_READ_LUA
        self.full_pace_keys = full_pace_keys
        self.error_grace_s = error_grace_s
        self.block_ms = block_ms
        self.count = count
        self.min_round_s = min_round_s
        self.max_round_s = max(min_round_s, max_round_s)
        # the reader's own connection: its XREAD holds it while blocked. Its replies
        # are taken as Redis sends them: redis-py's XREAD callback builds a dict per
        # entry, a third of the reader's time at thousands of entries a second.
        self.hub_id = uuid.uuid4().hex
        self._client: aioredis.Redis = redis_async_new(
            url, max_connections=1, client_name=f"stream-hub-{self.hub_id}"
        )
        self._client.response_callbacks["XREAD"] = _raw
        self._joined_read = self._client.register_script(streams_joined.JOINED_READ_LUA)
        self._keys: dict[str, list[Subscription]] = {}
        self._open = 0  # subscriptions in _keys
        self._task: asyncio.Task[None] | None = None
        self._wake_tasks: set[asyncio.Task[None]] = set()
        self._wake_key = keys.hub_wake_key(self.hub_id)
        self._wake_after = protocol.STREAM_START
        self._reading = False
        self._wake_sent = False
        self._pausing: asyncio.Future[None] | None = None  # waiting out the holds
        self.rounds = 0  # XREAD rounds so far (for tests and benchmarks)
        self.wakes = 0  # wake-up entries written

    def subscribe(self, *, job_id: str, after: str) -> Subscription:
        """Follow generation ``job_id`` from entry id ``after`` (``0-0``: its start)."""
        key = keys.gen_key(job_id)
        sub = Subscription(self, key, after)
        self._keys.setdefault(key, []).append(sub)
        self._open += 1
        self._poke()
        return sub

    def __len__(self) -> int:
        """How many subscriptions are open (kept as a count: followers ask per frame)."""
        return self._open

    def _remove(self, sub: Subscription) -> None:
        subs = self._keys.get(sub.key)
        if subs is None or sub not in subs:
            return
        subs.remove(sub)
        self._open -= 1
        if not subs:
            del self._keys[sub.key]

    def _poke(self) -> None:
        """A subscription was added or moved: make sure the next XREAD includes it."""
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name="stream-hub"
            )
        elif self._pausing is not None:
            wake_waiter(self._pausing)
        elif self._reading and not self._wake_sent:
            self._wake_sent = True
            task = asyncio.get_running_loop().create_task(self._wake())
            self._wake_tasks.add(task)  # the loop keeps only a weak reference
            task.add_done_callback(self._wake_tasks.discard)

    async def _wake(self) -> None:
        """End the pending XREAD by appending to the hub's wake-up stream."""
        self.wakes += 1
        try:
            async with redis_async(self.url).pipeline(transaction=False) as pipe:
                pipe.xadd(self._wake_key, {"w": "1"}, maxlen=1, approximate=False)
                pipe.expire(self._wake_key, WAKE_TTL_S)
                await pipe.execute()
        except RedisError as exc:  # the XREAD fails too, or ends within its block
            logger.warning("stream hub wake-up failed: %r", exc)

    def _streams(self) -> tuple[redis_types.StreamOffsets, dict[str, tuple[int, int]]]:
        """The XREAD's ``{key: id}`` (each key from its lowest subscription)."""
        streams: redis_types.StreamOffsets = {}
        asked: dict[str, tuple[int, int]] = {}
        for key, subs in self._keys.items():
            first = subs[0] if len(subs) == 1 else min(subs, key=lambda s: s._pos)
            streams[key] = first.after
            asked[key] = first._pos
        streams[self._wake_key] = self._wake_after
        return streams, asked

    async def _run(self) -> None:
        """The reader: XREAD rounds while anyone follows a stream."""
        try:
            await self._rounds()
        finally:  # a finished task holds its loop: let a closed loop go
            if self._task is asyncio.current_task():
                self._task = None

    async def _rounds(self) -> None:
        loop = asyncio.get_running_loop()
        failing_since: float | None = None  # loop time of the first failed read
        busy = False  # the last round returned entries: read joined, not blocking
        while self._keys:
            started = loop.time()
            streams, asked = self._streams()
            joined = busy and self.joined
            # a joined read does not block: a subscription made meanwhile waits for
            # the next round, with no wake-up entry
            self._reading, self._wake_sent = not joined, False
            try:
                if joined:
                    result = await self._read_joined(streams, asked)
                else:
                    result = await self._read(streams)
            except asyncio.CancelledError as exc:
                self._reading = False
                self._fail_all(exc)
                raise
            except Exception as exc:  # noqa: BLE001 - every follower must hear of it
                self._reading = False
                if not isinstance(exc, (RedisError, OSError)):
                    logger.exception("stream hub read failed")
                    self._fail_all(exc)  # not a blip: a retry would fail the same
                elif failing_since is None:
                    failing_since = loop.time()
                    logger.warning("stream hub read failed, retrying: %r", exc)
                elif loop.time() - failing_since >= self.error_grace_s:
                    self._fail_all(exc)
                    failing_since = None  # later followers get a grace of their own
                await asyncio.sleep(ERROR_BACKOFF_S)
                continue
            failing_since = None
            self._reading = False
            self.rounds += 1
            busy = bool(result)
            self._dispatch(result, asked, joined and self.joined)
            rest = started + self._pace(len(streams)) - loop.time()
            if result and rest > 0:
                await asyncio.sleep(rest)
            if result:
                await self._holds_wait(loop)

    async def _holds_wait(self, loop: asyncio.AbstractEventLoop) -> None:
        """Wait for the earliest ``Subscription.due`` (a :meth:`_poke` ends it)."""
        holds = (sub.due for subs in self._keys.values() for sub in subs)
        rest = min(holds, default=0.0) - loop.time()
        if rest <= 0:
            return
        waiter = self._pausing = loop.create_future()
        timer = loop.call_later(rest, wake_waiter, waiter)
        try:
            await waiter
        finally:
            timer.cancel()
            self._pausing = None

    def _pace(self, keys: int) -> float:
        """The least time between the starts of two rounds that returned entries (s):
        ``min_round_s`` at ``full_pace_keys`` keys, in proportion to the keys below and
        above, at most ``max_round_s``."""
        return min(self.max_round_s, self.min_round_s * keys / self.full_pace_keys)

    async def _read(self, streams: redis_types.StreamOffsets) -> Any:
        """One XREAD round: up to ``count`` entries per key, blocking ``block_ms``."""
        return await self._client.xread(streams, count=self.count, block=self.block_ms)

    async def _read_joined(
        self, streams: redis_types.StreamOffsets, asked: dict[str, tuple[int, int]]
    ) -> Any:
        """One round of :data:`JOINED_READ_LUA` (no block). A Redis that refuses the
        script (before 7.0: no script flags) is read with XREAD from then on."""
        keys_, argv = streams_joined.joined_args(self.count, self._keys, streams, asked)
        if not keys_:
            return []
        try:
            return await self._joined_read(keys=keys_, args=argv)
        except ResponseError as exc:
            logger.warning("stream hub joined read refused, using XREAD: %r", exc)
            self.joined = False
            return await self._read(streams)

    def _dispatch(
        self, result: Any, asked: dict[str, tuple[int, int]], joined: bool = False
    ) -> None:
        """Hand each key's entries of a round to its subscriptions: XREAD's reply
        (``joined`` False: each run of tokens joined here, where every follower of
        the key is at the position asked) or the joined read's."""
        if not result:
            return
        pairs = result.items() if isinstance(result, dict) else result
        for key, entries in pairs:
            if key == self._wake_key:
                self._wake_after = entries[-1][0]
                continue
            subs = self._keys.get(key)
            if not subs or key not in asked:
                continue  # everyone left while the XREAD was pending
            pos = asked[key]
            if joined:
                events = streams_joined.joined_events(entries)
            elif len(subs) == 1 or all(sub._pos == pos for sub in subs):
                events = protocol_runs.events_parse_joined(entries)
            else:  # a follower behind the others takes the entries one by one
                events = [protocol.event_parse_flat(i, f) for i, f in entries]
            last = id_key(entries[-1][0])
            for sub in list(subs):
                sub._deliver(asked[key], events, last)

    def _fail_all(self, exc: BaseException) -> None:
        """Fail every subscription (they are dropped: their followers end)."""
        keys, self._keys, self._open = self._keys, {}, 0
        for subs in keys.values():
            for sub in subs:
                sub._fail(exc)


def stream_hub(url: str | None = None) -> StreamHub:
    """Return the running event loop's stream hub for ``url`` (default REDIS_URL): on a
    ``redis+cluster://`` URL one reading per node (inference/streams_cluster.py)."""
    url = url or settings.REDIS_URL
    per_loop = _hubs.setdefault(asyncio.get_running_loop(), {})
    hub = per_loop.get(url)
    if hub is None:
        from chatsite.redis_cluster import is_cluster_url

        if is_cluster_url(url):
            from inference.streams_cluster import ClusterStreamHub

            hub = per_loop[url] = ClusterStreamHub(url=url)
        else:
            hub = per_loop[url] = StreamHub(url=url)
    return hub
