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

:class:`RateCountRedisCache` is the cache django-ratelimit counts in
(``RATELIMIT_USE_CACHE``): its ``add`` of a count does the library's whole count in
one round trip instead of two.
"""

from __future__ import annotations

from contextvars import ContextVar
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


# django-ratelimit's count (``django_ratelimit.core.get_usage``): SET NX the window's
# first count (ARGV[1]: 1 when the call counts, 0 when it only reads) with its expiry
# (ARGV[2], s); when the window already has a count, INCRBY it (GET when reading).
# {1}: the key was made; {0, the count}: it was there.
_COUNT = """
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'EX', ARGV[2]) then return {1} end
if ARGV[1] == '0' then return {0, redis.call('GET', KEYS[1])} end
return {0, redis.call('INCRBY', KEYS[1], ARGV[1])}
"""

# The count :meth:`RateCountRedisCacheClient.add` read for the call after it, in this
# context: (key, what reads it: 1 for ``incr(key, 1)``, 0 for ``get(key)``, value).
_counted: ContextVar[tuple[Any, int, Any] | None] = ContextVar(
    "rate_counted", default=None
)


class RateCountRedisCacheClient(SharedClientRedisCacheClient):
    """The shared client whose ``add`` of the count 0 or 1 with an expiry also reads
    or counts the window that is already there, in the same script.

    django-ratelimit's ``get_usage`` calls ``add(key, 1, period)``, then, when the
    key was there, ``incr(key)`` (``add(key, 0, period)`` then ``get(key)`` for a call
    that does not count): two round trips. Here ``add`` runs :data:`_COUNT` and keeps
    the count it read for that next call, which answers without Redis. So in this
    cache an ``add(key, 1, timeout)`` that returns False has counted already: only
    django-ratelimit may use it (``RATELIMIT_USE_CACHE``). Every other call, and
    ``add`` of any other value or without an expiry, is Django's.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._count_scripts: dict[int, Any] = {}

    def add(self, key: Any, value: Any, timeout: Any) -> bool:
        """Django's ``add``; for ``value`` 0 or 1 and ``timeout`` > 0 (s), one
        script that also reads (0) or counts (1) the window already there."""
        _counted.set(None)
        if type(value) is not int or value not in (0, 1) or not timeout:
            return bool(super().add(key, value, timeout))
        client = self.get_client(key, write=True)
        script = self._count_scripts.get(id(client))
        if script is None:
            script = self._count_scripts.setdefault(
                id(client), client.register_script(_COUNT)
            )
        answer = script(keys=[key], args=[value, int(timeout)])
        if answer[0] == 1:
            return True
        _counted.set((key, value, answer[1]))
        return False

    def _counted_take(self, key: Any, reader: int) -> Any:
        """The value :meth:`add` read for ``reader`` on ``key``, or None; the slot
        is emptied either way."""
        counted = _counted.get()
        if counted is None:
            return None
        _counted.set(None)
        if counted[0] != key or counted[1] != reader:
            return None
        return counted[2]

    def incr(self, key: Any, delta: int) -> Any:
        """The count :meth:`add` made just before on ``key`` when ``delta`` is 1,
        else Django's ``incr`` (ValueError for a missing key)."""
        if delta == 1:
            value = self._counted_take(key, 1)
            if value is not None:
                return value
        return super().incr(key, delta)

    def get(self, key: Any, default: Any) -> Any:
        """The value :meth:`add` of 0 read just before on ``key``, else Django's
        ``get``."""
        value = self._counted_take(key, 0)
        if value is not None:
            return self._serializer.loads(value)  # type: ignore[attr-defined]
        return super().get(key, default)


class RateCountRedisCache(RedisCache):
    """``CACHES[...]["BACKEND"]`` of django-ratelimit's cache
    (``RATELIMIT_USE_CACHE``): :class:`RateCountRedisCacheClient`; options as
    Django's ``RedisCache``."""

    def __init__(self, server: Any, params: dict[str, Any]) -> None:
        super().__init__(server, params)
        self._class = RateCountRedisCacheClient
