"""The stream hub on a Redis Cluster: one reader per node, one read per node a round.

A cluster refuses a command whose keys lie in different slots, and every generation
stream has a slot of its own (its hash tag is its job id), so the single-node hub's
one ``XREAD`` over every followed stream cannot run there, not even over the streams
of one node. Here the followed streams are grouped by the master that serves their
slot, and one reader task per master reads all of that master's streams with ONE
command a round: :data:`READ_LUA`, a read-only script allowed to touch keys of many
slots of its node (Redis 7 ``allow-cross-slot-keys``), runs ``XREAD COUNT`` on each
and returns what XREAD would return for all of them.

A script cannot block, so a reader whose round found nothing waits CLUSTER_POLL_S
(or until a subscription is added: no wake-up stream is needed, the wait is in this
process) before the next round; a round that found entries is paced as on one node
(:meth:`StreamHub._pace`). On a failed read (the master died, or its slots moved)
the reader's streams go back to the hub, which refreshes the slot map
(``CLUSTER SLOTS``) every ERROR_BACKOFF_S and hands them to the reader of their
master now (after a failover: the promoted replica); a stream that cannot be read
for REDIS_CLUSTER_FAILOVER_S (a failover's length, where one node's hub allows
ERROR_GRACE_S for a restart) fails its followers with :class:`StreamReadError`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import redis.asyncio as aioredis
from django.conf import settings
from redis.exceptions import RedisError, ResponseError

from chatsite.redis_cluster import cluster_url_parse
from inference import redis_types
from inference.connections import redis_async
from inference.streams import (
    ERROR_BACKOFF_S,
    HUB_COUNT,
    HUB_FULL_PACE_KEYS,
    HUB_MAX_ROUND_S,
    HUB_MIN_ROUND_S,
    StreamHub,
)
from inference.streams_subscription import StreamReadError, Subscription

logger = logging.getLogger(__name__)

# ARGV: COUNT, then key, id pairs. Returns XREAD's reply over those keys: a list of
# [key, entries] for each key with entries after its id.
READ_LUA = """#!lua flags=no-writes,allow-cross-slot-keys
local count = ARGV[1]
local out = {}
for i = 2, #ARGV, 2 do
  local r = redis.call('XREAD', 'COUNT', count, 'STREAMS', ARGV[i], ARGV[i + 1])
  if r then out[#out + 1] = r[1] end
end
return out
"""
# The same for Redis 6, which knows no script flags (and checks only that each key a
# script touches is on its node): tried once a Redis refuses the flagged script.
READ_LUA_V6 = READ_LUA.split("\n", 1)[1]
# How long a reader whose round found nothing waits for the next round (s). Followers
# release frames every SSE_COALESCE_MS (50 ms), so a token waits at most this much
# more than on one node, 10 ms on average; an idle reader costs its master 50 rounds
# a second.
CLUSTER_POLL_S = 0.02


class _NodeReader:
    """The reader of one master's streams: its own connection, its keys, its task."""

    def __init__(self, hub: ClusterStreamHub, name: str, host: str, port: int) -> None:
        self.hub = hub
        self.name = name
        self.keys: set[str] = set()
        self.client = aioredis.Redis(
            host=host,
            port=port,
            decode_responses=True,
            max_connections=1,
            **hub.credentials,
        )
        self.script = self.client.register_script(hub.read_lua)
        self.event = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    def add(self, key: str) -> None:
        self.keys.add(key)
        self.event.set()
        if self.task is None or self.task.done():
            self.task = asyncio.get_running_loop().create_task(
                self._run(), name=f"stream-hub-{self.name}"
            )

    async def _run(self) -> None:
        try:
            await self._rounds()
        except Exception as exc:  # a bug here must fail its followers, not hang them
            logger.exception("stream hub reader of %s failed", self.name)
            self.hub._fail_keys(list(self.keys), exc)
            self.keys.clear()
        finally:
            if self.hub._readers.get(self.name) is self and not self.keys:
                del self.hub._readers[self.name]
            with contextlib.suppress(Exception):
                await self.client.aclose()

    async def _rounds(self) -> None:
        hub = self.hub
        loop = asyncio.get_running_loop()
        while self.keys:
            started = loop.time()
            self.event.clear()
            streams, asked = hub._streams_of(self.keys)
            args: list[Any] = [hub.count]
            for key, after in streams.items():
                args += [key, after]
            try:
                result = await self.script(args=args)
            except asyncio.CancelledError:
                raise
            except ResponseError as exc:
                flagged = self.script.script == READ_LUA
                if not flagged or "compil" not in str(exc).lower():
                    logger.warning("stream hub read on %s failed: %r", self.name, exc)
                    hub._reader_failed(self, exc)  # CLUSTERDOWN, a moved slot
                    return
                hub.read_lua = READ_LUA_V6  # a Redis 6 server
                self.script = self.client.register_script(hub.read_lua)
                continue
            except Exception as exc:  # noqa: BLE001 - every follower must hear of it
                if not isinstance(exc, (RedisError, OSError)):
                    logger.exception("stream hub read failed")
                    hub._fail_keys(list(self.keys), exc)
                    self.keys.clear()
                    return
                logger.warning("stream hub read on %s failed: %r", self.name, exc)
                hub._reader_failed(self, exc)
                return
            hub.rounds += 1
            for key in streams:
                hub._failing.pop(str(key), None)
            hub._dispatch(result, asked)
            rest = started + (hub._pace(len(streams)) if result else 0) - loop.time()
            if result:
                if rest > 0:
                    await asyncio.sleep(rest)
                continue
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.event.wait(), CLUSTER_POLL_S)


class ClusterStreamHub(StreamHub):
    """The :class:`StreamHub` of a ``redis+cluster://`` URL (same interface)."""

    def __init__(
        self,
        *,
        url: str,
        count: int = HUB_COUNT,
        min_round_s: float = HUB_MIN_ROUND_S,
        full_pace_keys: int = HUB_FULL_PACE_KEYS,
        max_round_s: float = HUB_MAX_ROUND_S,
        error_grace_s: float | None = None,
    ) -> None:
        parsed = cluster_url_parse(url)
        if parsed is None:
            raise ValueError(f"not a cluster URL: {url!r}")
        self.url = url
        self.count = count
        self.min_round_s = min_round_s
        self.full_pace_keys = full_pace_keys
        self.max_round_s = max(min_round_s, max_round_s)
        self.error_grace_s = (
            settings.REDIS_CLUSTER_FAILOVER_S
            if error_grace_s is None
            else error_grace_s
        )
        self.credentials = {
            k: v
            for k, v in parsed.client_kwargs().items()
            if k in ("username", "password", "ssl")
        }
        self._keys: dict[str, list[Subscription]] = {}
        self._open = 0
        self._task: asyncio.Task[None] | None = None
        self._wake_key = ""  # no wake-up stream: readers wait in-process
        self.rounds = 0
        self.wakes = 0
        self._readers: dict[str, _NodeReader] = {}
        self._owner: dict[str, str] = {}  # key -> name of its reader
        self._unassigned: set[str] = set()
        self._failing: dict[str, float] = {}  # key -> loop time of its first failure
        self._stale = False  # the slot map must be refreshed
        self._last_error: BaseException | None = None
        self._assign_event: asyncio.Event | None = None
        self.read_lua = READ_LUA

    def subscribe(self, *, job_id: str, after: str) -> Subscription:
        sub = super().subscribe(job_id=job_id, after=after)
        if sub.key not in self._owner:
            self._unassigned.add(sub.key)
        return sub

    def _remove(self, sub: Subscription) -> None:
        super()._remove(sub)
        if sub.key in self._keys:
            return
        self._unassigned.discard(sub.key)
        self._failing.pop(sub.key, None)
        name = self._owner.pop(sub.key, None)
        if name is not None and name in self._readers:
            self._readers[name].keys.discard(sub.key)
        if not self._keys and self._assign_event is not None:
            self._assign_event.set()  # the manager ends

    def _poke(self) -> None:
        """A subscription was added or moved: assign it, wake the readers."""
        if self._assign_event is None:
            self._assign_event = asyncio.Event()
        self._assign_event.set()
        for reader in self._readers.values():
            reader.event.set()
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name="stream-hub-cluster"
            )

    async def _run(self) -> None:
        """The manager: gives each unassigned stream to its master's reader."""
        assert self._assign_event is not None
        try:
            while self._keys:
                self._assign_event.clear()
                if self._unassigned:
                    if self._stale:
                        await asyncio.sleep(ERROR_BACKOFF_S)
                    try:
                        await self._assign()
                    except (RedisError, OSError) as exc:
                        logger.warning("stream hub slot map failed: %r", exc)
                        self._last_error, self._stale = exc, True
                        self._expire_failing()
                        continue
                if self._keys and not self._unassigned:
                    await self._assign_event.wait()
        finally:
            if self._task is asyncio.current_task():
                self._task = None

    async def _assign(self) -> None:
        cluster: Any = redis_async(self.url)
        if self._stale:
            await cluster.nodes_manager.initialize()
            self._stale = False
        else:
            await cluster.initialize()
        self._expire_failing()
        for key in list(self._unassigned):
            node = cluster.get_node_from_key(key)
            reader = self._readers.get(node.name)
            if reader is None:
                reader = self._readers[node.name] = _NodeReader(
                    self, node.name, node.host, int(node.port)
                )
            self._owner[key] = node.name
            self._unassigned.discard(key)
            reader.add(key)

    def _streams_of(
        self, keys: set[str]
    ) -> tuple[redis_types.StreamOffsets, dict[str, tuple[int, int]]]:
        """The ``{key: id}`` of a reader's round (each key from its lowest follower)."""
        streams: redis_types.StreamOffsets = {}
        asked: dict[str, tuple[int, int]] = {}
        for key in keys:
            subs = self._keys.get(key)
            if not subs:
                continue
            first = subs[0] if len(subs) == 1 else min(subs, key=lambda s: s._pos)
            streams[key] = first.after
            asked[key] = first._pos
        return streams, asked

    def _reader_failed(self, reader: _NodeReader, exc: BaseException) -> None:
        """Take the streams of a reader whose read failed back for reassignment."""
        now = asyncio.get_running_loop().time()
        for key in reader.keys:
            self._failing.setdefault(key, now)
            self._owner.pop(key, None)
            if key in self._keys:
                self._unassigned.add(key)
        reader.keys.clear()
        if self._readers.get(reader.name) is reader:
            del self._readers[reader.name]
        self._last_error, self._stale = exc, True
        self._poke()

    def _expire_failing(self) -> None:
        """Fail the followers of streams unread for ``error_grace_s`` or longer."""
        now = asyncio.get_running_loop().time()
        expired = [
            key
            for key in self._unassigned
            if now - self._failing.get(key, now) >= self.error_grace_s
        ]
        if expired:
            self._fail_keys(expired, self._last_error or StreamReadError("no reader"))

    def _fail_keys(self, keys: list[str], exc: BaseException) -> None:
        for key in keys:
            subs = self._keys.pop(key, [])
            self._open -= len(subs)
            self._unassigned.discard(key)
            self._failing.pop(key, None)
            self._owner.pop(key, None)
            for sub in subs:
                sub._fail(exc)
