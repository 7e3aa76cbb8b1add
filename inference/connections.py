"""Redis clients for the inference tier.

The sync client is shared by the process (redis-py pools are thread-safe). Async clients
are bound to an event loop, so one is kept per running loop. A ``redis+sentinel://`` URL
gives clients of the master that a Sentinel names (chatsite/sentinel.py), which follow
it through a failover; a ``redis+cluster://`` URL gives Redis Cluster clients
(chatsite/redis_cluster.py), which route each command to its key's master.
"""

from __future__ import annotations

import asyncio
import weakref
from typing import Any

import redis
import redis.asyncio as aioredis
from django.conf import settings
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import ExponentialWithJitterBackoff
from redis.retry import Retry

from chatsite.redis_cluster import (
    cluster_client_async,
    cluster_client_sync,
    cluster_url_parse,
)
from chatsite.sentinel import (
    sentinel_master_async,
    sentinel_master_sync,
    sentinel_url_parse,
)

_sync_clients: dict[str, redis.Redis] = {}

# A command that fails with ConnectionError or TimeoutError is sent again on a fresh
# connection up to this many times, 10 ms to 0.5 s apart (with jitter). Clients built
# from a URL get redis-py's connection default, no retry at all, so after a Redis
# restart (or failover) the first command on each pooled connection failed on its
# stale socket: a resumed answer stream ended "interrupted" although Redis was back
# (tests/test_faults.py, the Redis restart drill). redis-py's own Redis() default is
# 10 retries; a few cover a restart, and keep a command that could not have run from
# waiting long. A retried write may run twice if the connection broke after Redis
# ran it and before the reply: the same window redis-py's defaults accept.
COMMAND_RETRIES = 3
_BACKOFF = {"base": 0.01, "cap": 0.5}

_async_clients: weakref.WeakKeyDictionary[
    asyncio.AbstractEventLoop, dict[str, aioredis.Redis]
] = weakref.WeakKeyDictionary()


def redis_sync(url: str | None = None) -> redis.Redis:
    """Return the process-wide sync client for ``url`` (default ``settings.REDIS_URL``,
    plain or Sentinel).

    Its pool holds up to REDIS_SYNC_MAX_CONNECTIONS connections. A thread that finds
    them all in use waits up to REDIS_SYNC_POOL_TIMEOUT_S seconds for one (then
    redis-py raises ``ConnectionError``): under ASGI every request runs its sync steps
    in a thread of its own, so a thousand streams settling at once ask for a thousand
    connections, and redis-py's default pool (100, then ``MaxConnectionsError`` at
    once) would fail the excess. A Sentinel client
    keeps redis-py's non-blocking Sentinel pool, sized the same; a cluster client
    (:class:`redis.cluster.RedisCluster`) one such pool per node.
    """
    url = url or settings.REDIS_URL
    client: Any = _sync_clients.get(url)
    if client is None:
        size = settings.REDIS_SYNC_MAX_CONNECTIONS
        sentinel = sentinel_url_parse(url)
        cluster = cluster_url_parse(url)
        if cluster is not None:
            # per node: a cluster client keeps one pool per node it talks to
            client = cluster_client_sync(
                cluster,
                decode_responses=True,
                max_connections=size,
                retry=Retry(ExponentialWithJitterBackoff(**_BACKOFF), COMMAND_RETRIES),
            )
        elif sentinel is not None:
            client = sentinel_master_sync(
                sentinel,
                decode_responses=True,
                max_connections=size,
                retry=Retry(ExponentialWithJitterBackoff(**_BACKOFF), COMMAND_RETRIES),
            )
        else:
            pool = redis.BlockingConnectionPool.from_url(
                url,
                retry=Retry(ExponentialWithJitterBackoff(**_BACKOFF), COMMAND_RETRIES),
                decode_responses=True,
                max_connections=size,
                timeout=settings.REDIS_SYNC_POOL_TIMEOUT_S,
            )
            client = redis.Redis(connection_pool=pool)
        _sync_clients[url] = client
    return client


def redis_async_new(
    url: str, *, max_connections: int | None = None, client_name: str | None = None
) -> aioredis.Redis:
    """Return a new async client for ``url`` whose pool holds up to
    ``max_connections`` connections (default REDIS_ASYNC_MAX_CONNECTIONS), each named
    ``client_name`` in Redis's CLIENT LIST if given.

    redis-py 8's async pool allows 100 by default and then raises MaxConnectionsError,
    and a worker writes for each running job (and, before the stream hub of
    :mod:`inference.streams`, every open SSE stream held one connection in a
    blocking XREAD), so a busy process needs more than the default. Commands are
    retried on a fresh connection (COMMAND_RETRIES). ``url`` may be a Sentinel URL
    (chatsite/sentinel.py) or a cluster URL (chatsite/redis_cluster.py: an asyncio
    :class:`~redis.asyncio.cluster.RedisCluster`, ``max_connections`` per node; it
    has no ``client_name``).
    """
    options: dict[str, Any] = {
        "decode_responses": True,
        "max_connections": max_connections or settings.REDIS_ASYNC_MAX_CONNECTIONS,
        "client_name": client_name,
        "retry": AsyncRetry(ExponentialWithJitterBackoff(**_BACKOFF), COMMAND_RETRIES),
    }
    cluster = cluster_url_parse(url)
    if cluster is not None:
        options.pop("client_name")
        return cluster_client_async(cluster, **options)  # type: ignore[return-value]
    sentinel = sentinel_url_parse(url)
    if sentinel is not None:
        return sentinel_master_async(sentinel, **options)
    return aioredis.Redis.from_url(url, **options)


def redis_async(url: str | None = None) -> aioredis.Redis:
    """Return the async client of the running event loop for ``url``."""
    url = url or settings.REDIS_URL
    loop = asyncio.get_running_loop()
    per_loop = _async_clients.setdefault(loop, {})
    client = per_loop.get(url)
    if client is None:
        client = per_loop[url] = redis_async_new(url)
    return client
