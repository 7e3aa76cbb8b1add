"""The site cache's connection pool (chatsite/sentinel.py ``redis_cache_config``):
one pool serves every request of a process, so more concurrent calls than it has
connections wait for one instead of failing with redis-py's MaxConnectionsError."""

from __future__ import annotations

import threading

import redis

from chatsite.cache import SharedClientRedisCache
from chatsite.sentinel import redis_cache_config


def test_calls_past_the_pool_size_wait_for_a_connection(settings):
    config = redis_cache_config(
        settings.REDIS_URL, key_prefix="pooltest", max_connections=2, pool_timeout_s=10
    )
    cache = SharedClientRedisCache(config["LOCATION"], config)
    client = cache._cache.get_client(write=True)
    assert isinstance(client.connection_pool, redis.BlockingConnectionPool)
    errors: list[BaseException] = []
    start = threading.Barrier(12)

    def hold() -> None:
        start.wait()
        try:
            # each call holds its connection ~50 ms: 12 at once on a pool of 2
            client.blpop(["pooltest:empty"], timeout=0.05)
        except BaseException as exc:  # noqa: BLE001 - the test reports any
            errors.append(exc)

    threads = [threading.Thread(target=hold) for _ in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert len(client.connection_pool._connections) <= 2
