"""The worker's side of conversation affinity (:mod:`inference.affinity` routes the
jobs), a base class of :class:`inference.worker.Worker`.

After each job the worker publishes its ``busy`` slots in its hash, and when the job
named a conversation, records itself as the conversation's worker for
``affinity_ttl_s`` seconds (``inf:aff:<pool>:{a:<affinity>}``). Every
``affinity_sweep_s`` seconds, the worker that wins the pool's sweep lock moves each job
left undelivered in a worker's own stream (``inf:qw:{p:<pool>}:<worker>``) for more
than ``affinity_wait_s`` seconds to the pool's queue, by Redis's clock, in one script
per stream (:data:`_SWEEP_LUA`), and counts the moved jobs in
``inference:affinity_fallbacks_total``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import cast

import redis.asyncio as aioredis

from inference import keys, metrics, protocol

logger = logging.getLogger("inference.worker")

# Move a worker's overdue jobs to the pool's queue. KEYS = the worker's own stream, the
# pool's queue, the pool's set of own streams; ARGV = max wait (ms), worker id, group,
# 1 if the worker is gone (its empty stream is then deleted). An entry is undelivered
# when newer than the group's last-delivered id; it is overdue when its id (Redis's
# clock at XADD, ms) is older than now - max wait. Returns the number moved.
_SWEEP_LUA = """
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('SREM', KEYS[3], ARGV[2])
  return 0
end
local last = '0-0'
local ok, groups = pcall(redis.call, 'XINFO', 'GROUPS', KEYS[1])
if ok then
  for _, g in ipairs(groups) do
    local name, id
    for i = 1, #g, 2 do
      if g[i] == 'name' then name = g[i + 1] end
      if g[i] == 'last-delivered-id' then id = g[i + 1] end
    end
    if name == ARGV[3] and id then last = id end
  end
end
local t = redis.call('TIME')
local cutoff = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  - tonumber(ARGV[1])
local moved = 0
if cutoff > 0 then
  local entries = redis.call('XRANGE', KEYS[1], '(' .. last, tostring(cutoff),
    'COUNT', 100)
  for _, e in ipairs(entries) do
    redis.call('XADD', KEYS[2], '*', unpack(e[2]))
    redis.call('XDEL', KEYS[1], e[1])
    moved = moved + 1
  end
end
if redis.call('XLEN', KEYS[1]) == 0 then
  redis.call('SREM', KEYS[3], ARGV[2])
  if ARGV[4] == '1' then redis.call('DEL', KEYS[1]) end
end
return moved
"""


class AffinitySweep:
    """The worker's side of affinity (a base class of :class:`~inference.worker.Worker`).

    Uses the worker's ``redis``, ``pool``, ``worker_id``, ``worker_ttl_s`` and
    ``_closing``; ``affinity_wait_s`` (the bound, s), ``affinity_sweep_s`` (the
    sweep interval, s) and ``affinity_ttl_s`` (how long a conversation remembers this
    worker, s; 0: never recorded) are set by the Worker.
    """

    pool: str
    worker_id: str
    worker_ttl_s: float
    affinity_wait_s: float
    affinity_sweep_s: float
    affinity_ttl_s: int
    _closing: bool

    @property
    def redis(self) -> aioredis.Redis:  # pragma: no cover - the Worker's
        raise NotImplementedError

    @property
    def own_queue(self) -> str:
        """This worker's own job stream."""
        return keys.worker_queue_key(self.pool, self.worker_id)

    async def _affinity_after(
        self, job: protocol.Job, busy: int, preemptible: int
    ) -> None:
        """After ``job`` ended: publish ``busy`` slots (the freed one shows at once;
        ``preemptible``: of them, background jobs an interactive one displaces) and
        record this worker as the preferred one of the job's conversation."""
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hset(
                keys.worker_key(self.worker_id),
                mapping={"busy": busy, "preemptible": preemptible},
            )
            if job.affinity and self.affinity_ttl_s > 0:
                pipe.set(
                    keys.affinity_key(self.pool, job.affinity),
                    self.worker_id,
                    ex=self.affinity_ttl_s,
                )
            await pipe.execute()

    async def _affinity_sweep_loop(self) -> None:
        while not self._closing:
            await asyncio.sleep(self.affinity_sweep_s)
            try:
                await self.affinity_sweep()
            except Exception:  # noqa: BLE001 - retried at the next interval
                logger.exception("affinity sweep failed")

    async def affinity_sweep(self, *, force: bool = False) -> int:
        """Move the pool's overdue own-stream jobs to its queue; return how many.

        Runs only if this worker wins the pool's sweep lock for this interval (or
        ``force``). Overdue: undelivered for more than ``affinity_wait_s`` seconds.
        The empty stream of a worker whose heartbeat is gone is deleted.
        """
        if not force and not await self.redis.set(
            keys.affinity_sweep_key(self.pool),
            self.worker_id,
            nx=True,
            px=max(1, int(self.affinity_sweep_s * 1000)),
        ):
            return 0
        members = await self.redis.smembers(keys.worker_queues_key(self.pool))
        if not members:
            return 0
        now = time.time()
        live = set(
            await self.redis.zrangebyscore(
                keys.workers_key(self.pool), now - self.worker_ttl_s, "+inf"
            )
        )
        moved = 0
        for worker in cast(set[str], members):
            moved += int(
                await self.redis.eval(
                    _SWEEP_LUA,
                    3,
                    keys.worker_queue_key(self.pool, worker),
                    keys.queue_key(self.pool),
                    keys.worker_queues_key(self.pool),
                    int(self.affinity_wait_s * 1000),
                    worker,
                    protocol.GROUP,
                    0 if worker in live else 1,
                )
            )
        if moved:
            metrics.AFFINITY_FALLBACKS.labels(pool=self.pool).inc(moved)
            logger.info(
                "affinity: %s overdue job(s) moved to pool %r", moved, self.pool
            )
        return moved
