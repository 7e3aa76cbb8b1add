"""Redis Sentinel: one URL for every Redis client of the product.

``REDIS_URL`` is either a plain ``redis://`` URL or a Sentinel URL::

    redis+sentinel://[[USER]:PASSWORD@]HOST:PORT[,HOST:PORT...]/SERVICE[/DB][?sentinel_password=P]

(the scheme and layout of the ``redis-sentinel-url`` package: the hosts are the
Sentinels, not Redis servers; ``SERVICE`` is the name the Sentinels monitor, e.g.
``mymaster``; ``DB`` defaults to 0). ``PASSWORD`` (and ``USER``) authenticate to the
Redis servers, ``sentinel_password`` to the Sentinels (their ``requirepass``).

Each client asks the Sentinels for the current master when it opens a connection, and
drops its connections when the master changes (redis-py's ``SentinelConnectionPool``):
after a failover the next command reaches the new master. Built here for
inference/connections.py (sync and async clients), Django's cache
(:class:`SentinelCachePool`, also django-ratelimit's store) and Celery's broker
(:func:`sentinel_celery_broker`, kombu's ``sentinel://`` transport).

This module reads no settings: the settings modules import it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, quote, unquote

import redis
import redis.asyncio as aioredis
import redis.asyncio.sentinel as aiosentinel
import redis.sentinel

from chatsite.redis_cluster import cluster_cache_config, is_cluster_url

SCHEME = "redis+sentinel"
# Sentinel's own port (redis.io "Redis Sentinel"), used when a host names none.
DEFAULT_SENTINEL_PORT = 26379
# How long a client waits for one Sentinel to connect or answer, s. redis-py asks the
# Sentinels in turn and moves on after an error; without a timeout a Sentinel host
# that is down without refusing (blackholed) would hold every new connection for the
# kernel's TCP timeout (minutes). A Sentinel answers from memory, within milliseconds.
SENTINEL_TIMEOUT_S = 2.0


@dataclass(frozen=True)
class SentinelUrl:
    """A parsed ``redis+sentinel://`` URL."""

    sentinels: tuple[tuple[str, int], ...]
    service_name: str
    db: int = 0
    username: str | None = None
    password: str | None = None
    sentinel_password: str | None = None

    def connection_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of a connection to the master (db and credentials)."""
        kwargs: dict[str, Any] = {"db": self.db}
        if self.username:
            kwargs["username"] = self.username
        if self.password:
            kwargs["password"] = self.password
        return kwargs

    def sentinel_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of a connection to a Sentinel: its timeouts and password."""
        kwargs: dict[str, Any] = {
            "socket_connect_timeout": SENTINEL_TIMEOUT_S,
            "socket_timeout": SENTINEL_TIMEOUT_S,
        }
        if self.sentinel_password:
            kwargs["password"] = self.sentinel_password
        return kwargs


def _host_port(text: str) -> tuple[str, int]:
    """Split ``host:port`` (``[v6]:port`` too); the port defaults to 26379."""
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port = rest.removeprefix(":")
    elif text.count(":") == 1:
        host, _, port = text.partition(":")
    else:
        host, port = text, ""
    if not host:
        raise ValueError(f"a Sentinel address has no host: {text!r}")
    return host, int(port) if port else DEFAULT_SENTINEL_PORT


def sentinel_url_parse(url: str) -> SentinelUrl | None:
    """Parse a ``redis+sentinel://`` URL; return None for any other URL.

    Raises ValueError when the URL has the Sentinel scheme but no Sentinel address
    or no service name, or a database that is not a number.
    """
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.lower() != SCHEME:
        return None
    rest, _, query = rest.partition("?")
    netloc, _, path = rest.partition("/")
    userinfo, _, hosts = netloc.rpartition("@")
    username, _, password = userinfo.partition(":")
    sentinels = tuple(_host_port(h) for h in hosts.split(",") if h)
    if not sentinels:
        raise ValueError(f"{SCHEME}:// URL without a Sentinel address: {url!r}")
    parts = [p for p in path.split("/") if p]
    if not parts:
        raise ValueError(
            f"{SCHEME}:// URL without the monitored service name "
            f"(e.g. {SCHEME}://sentinel1:26379/mymaster/0)"
        )
    options = parse_qs(query)
    return SentinelUrl(
        sentinels=sentinels,
        service_name=unquote(parts[0]),
        db=int(parts[1]) if len(parts) > 1 else 0,
        username=unquote(username) or None,
        password=unquote(password) or None,
        sentinel_password=options.get("sentinel_password", [None])[0],
    )


def sentinel_master_sync(parsed: SentinelUrl, **kwargs: Any) -> redis.Redis:
    """Return a sync client of the master of ``parsed``'s service; ``kwargs`` go to
    each connection (e.g. ``decode_responses``)."""
    manager = redis.sentinel.Sentinel(
        list(parsed.sentinels), sentinel_kwargs=parsed.sentinel_kwargs()
    )
    return manager.master_for(
        parsed.service_name, **parsed.connection_kwargs(), **kwargs
    )


def sentinel_master_async(parsed: SentinelUrl, **kwargs: Any) -> aioredis.Redis:
    """Return an asyncio client of the master of ``parsed``'s service (bound to the
    event loop that first uses it); ``kwargs`` go to its pool and connections (e.g.
    ``max_connections``, ``decode_responses``)."""
    manager = aiosentinel.Sentinel(
        list(parsed.sentinels), sentinel_kwargs=parsed.sentinel_kwargs()
    )
    return manager.master_for(
        parsed.service_name,
        redis_class=aioredis.Redis,
        **parsed.connection_kwargs(),
        **kwargs,
    )


class SentinelCachePool:
    """``OPTIONS["pool_class"]`` of Django's ``RedisCache`` for a Sentinel URL.

    Django builds each of its pools with ``pool_class.from_url(LOCATION, **options)``
    (django/core/cache/backends/redis.py); this returns redis-py's Sentinel pool of
    the master instead of a pool of one fixed server. LOCATION must be a list
    (``[url]``): a string would be split at the commas between the Sentinels.
    """

    @classmethod
    def from_url(
        cls, url: str, **options: Any
    ) -> redis.sentinel.SentinelConnectionPool:
        """Return a connection pool of the master named by the Sentinel ``url``.
        Raises ValueError for a URL that is not a Sentinel URL."""
        parsed = sentinel_url_parse(url)
        if parsed is None:
            raise ValueError(f"not a {SCHEME}:// URL: {url!r}")
        manager = redis.sentinel.Sentinel(
            list(parsed.sentinels), sentinel_kwargs=parsed.sentinel_kwargs()
        )
        return redis.sentinel.SentinelConnectionPool(
            parsed.service_name,
            manager,
            is_master=True,
            **parsed.connection_kwargs(),
            **options,
        )


# A cache's connections per process, and how long a call waits for one when all are
# in use (s). The cache's pool is shared by every request of the process (one client
# per pool, chatsite/cache.py), and a thousand streams opening at once read a
# thousand sessions: redis-py's plain pool raises MaxConnectionsError past its 100
# connections, so the plain URL's pool blocks instead (redis.BlockingConnectionPool).
CACHE_MAX_CONNECTIONS = 256
CACHE_POOL_TIMEOUT_S = 10.0


def redis_cache_config(
    url: str,
    *,
    key_prefix: str,
    rate_count: bool = False,
    max_connections: int = CACHE_MAX_CONNECTIONS,
    pool_timeout_s: float = CACHE_POOL_TIMEOUT_S,
) -> dict[str, Any]:
    """Return a ``CACHES`` entry for Django's ``RedisCache`` on ``url`` (plain,
    Sentinel or cluster: chatsite/redis_cluster.py). ``rate_count``: the entry of
    django-ratelimit's cache (``RATELIMIT_USE_CACHE``), which counts in one round
    trip (chatsite/cache.py ``RateCountRedisCache``; on a cluster, the cluster's
    cache, two round trips). On a plain URL a call finding all ``max_connections``
    connections in use waits up to ``pool_timeout_s`` seconds for one (then redis-py's
    ConnectionError: a 503); on a Sentinel URL the pool holds ``max_connections``."""
    if is_cluster_url(url):
        return cluster_cache_config(url, key_prefix=key_prefix)
    config: dict[str, Any] = {
        # Django's RedisCache, one client per pool (chatsite/cache.py)
        "BACKEND": "chatsite.cache."
        + ("RateCountRedisCache" if rate_count else "SharedClientRedisCache"),
        "LOCATION": url,
        "KEY_PREFIX": key_prefix,
        "OPTIONS": {
            "pool_class": "redis.BlockingConnectionPool",
            "max_connections": max_connections,
            "timeout": pool_timeout_s,
        },
    }
    if sentinel_url_parse(url) is not None:
        config["LOCATION"] = [url]
        config["OPTIONS"] = {
            "pool_class": "chatsite.sentinel.SentinelCachePool",
            "max_connections": max_connections,
        }
    return config


def redis_caches(
    url: str,
    *,
    size: int = CACHE_MAX_CONNECTIONS,
    wait_s: float = CACHE_POOL_TIMEOUT_S,
) -> dict[str, dict[str, Any]]:
    """Return the site's ``CACHES`` on ``url``: ``default`` (prefix ``cache``) and
    ``ratelimit``, django-ratelimit's (``RATELIMIT_USE_CACHE``), the same keys
    counted in one round trip (:func:`redis_cache_config` ``rate_count``); ``size``
    and ``wait_s``: each pool's ``max_connections`` and ``pool_timeout_s``."""
    return {
        alias: redis_cache_config(
            url,
            key_prefix="cache",
            rate_count=alias == "ratelimit",
            max_connections=size,
            pool_timeout_s=wait_s,
        )
        for alias in ("default", "ratelimit")
    }


def sentinel_celery_broker(url: str) -> tuple[str, dict[str, Any]]:
    """Return Celery's ``(broker_url, broker_transport_options)`` for ``url``.

    A plain URL is returned as it is, with no options. A Sentinel URL becomes kombu's
    form: one ``sentinel://[:PASSWORD@]HOST:PORT/DB`` per Sentinel joined by ``;``,
    with the service in the ``master_name`` transport option and the Sentinels'
    timeouts and password in ``sentinel_kwargs`` (kombu's ``SentinelChannel``).
    A cluster URL becomes the ``rediscluster://`` transport of
    chatsite/kombu_cluster.py.
    """
    if is_cluster_url(url):
        from chatsite import kombu_cluster

        return kombu_cluster.broker(url)
    parsed = sentinel_url_parse(url)
    if parsed is None:
        return url, {}
    auth = ""
    if parsed.password:
        user = quote(parsed.username or "", safe="")
        auth = f"{user}:{quote(parsed.password, safe='')}@"
    hosts = [f"[{h}]" if ":" in h else h for h, _ in parsed.sentinels]
    broker = ";".join(
        f"sentinel://{auth}{host}:{port}/{parsed.db}"
        for host, (_, port) in zip(hosts, parsed.sentinels, strict=True)
    )
    options = {
        "master_name": parsed.service_name,
        "sentinel_kwargs": parsed.sentinel_kwargs(),
    }
    return broker, options
