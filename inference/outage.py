"""The worker's side of a Redis outage: keep serving once Redis is back.

A base class of :class:`~inference.worker.Worker` (like
:class:`~inference.recovery.CrashRecovery`), so the worker module stays one job.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from inference import protocol

logger = logging.getLogger(__name__)

# How long the worker waits before reading again after Redis went away, s.
REDIS_RETRY_S = 0.5


class RedisOutageTolerance:
    """Read jobs through Redis restarts; the subclass provides the attributes used."""

    redis: aioredis.Redis
    worker_id: str
    pool: str
    block_ms: int

    async def _ensure_group(self) -> None:  # pragma: no cover - the Worker's
        raise NotImplementedError

    async def _take(self, count: int) -> Any:
        """Read up to ``count`` new jobs (XREADGROUP BLOCK); None after an outage.

        Redis restarting (connection refused or reset) or coming back empty (no
        persistence: the consumer group is gone, NOGROUP) must not end the worker:
        it waits REDIS_RETRY_S, recreates the group and reads again, so the pool is
        served again as soon as Redis is (tests/test_faults.py, the Redis drill).
        Without this the worker exited and the pool stayed offline until a
        supervisor restarted it.
        """
        try:
            return await self.redis.xreadgroup(
                protocol.GROUP,
                self.worker_id,
                {protocol.queue_key(self.pool): ">"},
                count=count,
                block=self.block_ms,
            )
        except (RedisConnectionError, RedisTimeoutError, ResponseError) as exc:
            if isinstance(exc, ResponseError) and "NOGROUP" not in str(exc):
                raise
            logger.warning("worker %s: Redis unavailable (%s)", self.worker_id, exc)
            await asyncio.sleep(REDIS_RETRY_S)
            try:
                await self._ensure_group()
            except (RedisConnectionError, RedisTimeoutError):
                pass  # still down: the next read tries again
            return None
