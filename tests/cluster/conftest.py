"""Fixtures of the cluster tests: a real Redis Cluster for the session (3 masters, 3
replicas, tests/redis_cluster.py) and every Redis client of the product pointed at
it for each test (``REDIS_URL``, Django's cache, Celery's broker)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from chatsite.sentinel import redis_caches, sentinel_celery_broker
from tests.conversations.openai.conftest import api_key, one_minute  # noqa: F401
from tests.redis_cluster import (
    RedisClusterGroup,
    cluster_folder,
    cluster_unavailable,
    started,
)


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[RedisClusterGroup]:
    """The session's cluster (skips the test where no redis-server can be had)."""
    reason = cluster_unavailable()
    if reason:
        pytest.skip(f"no Redis Cluster: {reason}")
    group = started(cluster_folder(os.getpid()))
    try:
        yield group
    finally:
        group.stop()


@pytest.fixture(autouse=True)
def on_cluster(redis_cluster: RedisClusterGroup, settings: Any) -> RedisClusterGroup:
    """This test's process (and the processes it starts: tests/stack.py passes
    ``REDIS_URL`` on) uses the cluster, emptied; a killed master of an earlier test
    is replaced (the cluster is whole again)."""
    redis_cluster.restore()
    url = redis_cluster.url
    settings.REDIS_URL = url
    settings.CACHES = redis_caches(url)
    broker = sentinel_celery_broker(url)  # as chatsite/settings/base.py
    settings.CELERY_BROKER_URL, settings.CELERY_BROKER_TRANSPORT_OPTIONS = broker
    redis_cluster.flush()
    return redis_cluster
