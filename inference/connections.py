"""Redis clients for the inference tier.

The sync client is shared by the process (redis-py pools are thread-safe). Async clients
are bound to an event loop, so one is kept per running loop.
"""

from __future__ import annotations

import asyncio
import weakref

import redis
import redis.asyncio as aioredis
from django.conf import settings

_sync_clients: dict[str, redis.Redis] = {}
_async_clients: weakref.WeakKeyDictionary[
    asyncio.AbstractEventLoop, dict[str, aioredis.Redis]
] = weakref.WeakKeyDictionary()


def redis_sync(url: str | None = None) -> redis.Redis:
    """Return the process-wide sync client for ``url`` (default ``settings.REDIS_URL``)."""
    url = url or settings.REDIS_URL
    client = _sync_clients.get(url)
    if client is None:
        client = _sync_clients[url] = redis.Redis.from_url(url, decode_responses=True)
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
    blocking XREAD), so a busy process needs more than the default.
    """
    return aioredis.Redis.from_url(
        url,
        decode_responses=True,
        max_connections=max_connections or settings.REDIS_ASYNC_MAX_CONNECTIONS,
        client_name=client_name,
    )


def redis_async(url: str | None = None) -> aioredis.Redis:
    """Return the async client of the running event loop for ``url``."""
    url = url or settings.REDIS_URL
    loop = asyncio.get_running_loop()
    per_loop = _async_clients.setdefault(loop, {})
    client = per_loop.get(url)
    if client is None:
        client = per_loop[url] = redis_async_new(url)
    return client
