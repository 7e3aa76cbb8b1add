"""The site's Django cache: Django's Redis cache, with one redis-py client per
connection pool instead of a new one per operation.

Django's ``RedisCacheClient.get_client`` builds a ``redis.Redis`` on every cache call
(django/core/cache/backends/redis.py); each build copies redis-py's table of response
callbacks (about 180 entries), which the profile of a chat message POST showed as a
share of the request's CPU (django-ratelimit counts in this cache on every POST, and
the sessions are cached here). A ``redis.Redis`` over a shared pool is thread-safe,
so one per pool serves every thread. ``incr`` is one round trip (a script), not
Django's two (EXISTS, then INCRBY): django-ratelimit calls it on every counted
request after the window's first.
"""

from __future__ import annotations

from typing import Any

from django.core.cache.backends.redis import RedisCache, RedisCacheClient

# INCRBY of an existing key only (Django's ``incr`` contract: a missing key is an
# error, not a new counter); nil when the key is missing
_INCR_EXISTING = """
if redis.call('EXISTS', KEYS[1]) == 0 then return false end
return redis.call('INCRBY', KEYS[1], ARGV[1])
"""


class SharedClientRedisCacheClient(RedisCacheClient):
    """Django's client, keeping the ``redis.Redis`` of each pool for later calls."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._clients: dict[int, Any] = {}
        self._scripts: dict[int, Any] = {}

    def incr(self, key: Any, delta: int) -> Any:
        """Add ``delta`` to the integer at ``key`` in one round trip; ValueError when
        ``key`` does not exist (as Django's)."""
        client = self.get_client(key, write=True)
        script = self._scripts.get(id(client))
        if script is None:
            script = self._scripts.setdefault(
                id(client), client.register_script(_INCR_EXISTING)
            )
        value = script(keys=[key], args=[delta])
        if value is None:
            raise ValueError(f"Key '{key}' not found.")
        return value

    def get_client(self, key: Any = None, *, write: bool = False) -> Any:
        """The client of the server Django picks for ``write`` (the first one for
        writes, any for reads), built once per server with Django's own pool."""
        django: Any = self  # Django's private attributes, which the stubs leave out
        index = django._get_connection_pool_index(write)
        client = self._clients.get(index)
        if client is None:
            if index not in django._pools:
                django._pools[index] = django._pool_class.from_url(
                    django._servers[index], **django._pool_options
                )
            client = django._client(connection_pool=django._pools[index])
            client = self._clients.setdefault(index, client)
        return client


class SharedClientRedisCache(RedisCache):
    """``CACHES[...]["BACKEND"]``: Django's ``RedisCache`` with
    :class:`SharedClientRedisCacheClient`; its options are Django's."""

    def __init__(self, server: Any, params: dict[str, Any]) -> None:
        super().__init__(server, params)
        self._class = SharedClientRedisCacheClient
