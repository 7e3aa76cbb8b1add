"""Redis Cluster URLs (chatsite/redis_cluster.py) and the settings built from them:
Django's cache and Celery's broker (the cluster itself: tests/cluster/)."""

from __future__ import annotations

import pytest

from chatsite.redis_cluster import ClusterUrl, cluster_url_parse, is_cluster_url
from chatsite.sentinel import redis_cache_config, sentinel_celery_broker


def test_a_cluster_url_names_its_nodes_credentials_and_options():
    parsed = cluster_url_parse(
        "redis+cluster://u:s3cret@10.0.0.1:7000,10.0.0.2,[fd00::3]:7001"
        "?read_from_replicas=1"
    )
    assert parsed == ClusterUrl(
        nodes=(("10.0.0.1", 7000), ("10.0.0.2", 6379), ("fd00::3", 7001)),
        username="u",
        password="s3cret",
        read_from_replicas=True,
    )
    assert parsed.client_kwargs() == {
        "username": "u",
        "password": "s3cret",
        "read_from_replicas": True,
    }
    assert is_cluster_url("REDIS+CLUSTER://h:1") and not is_cluster_url("redis://h:1/0")


def test_other_urls_are_not_cluster_urls_and_a_bad_cluster_url_is_refused():
    assert cluster_url_parse("redis://127.0.0.1:6379/0") is None
    assert cluster_url_parse("redis+sentinel://h:26379/mymaster/0") is None
    with pytest.raises(ValueError, match="node address"):
        cluster_url_parse("redis+cluster://")
    with pytest.raises(ValueError, match="database"):
        cluster_url_parse("redis+cluster://h:7000/3")
    with pytest.raises(ValueError, match="not known"):
        cluster_url_parse("redis+cluster://h:7000?db=2")


def test_a_cluster_url_gets_the_cluster_cache_and_the_one_slot_broker():
    url = "redis+cluster://a:7000,b:7001"
    config = redis_cache_config(url, key_prefix="c")
    # a string LOCATION would be split at the comma into two "servers"
    assert config["LOCATION"] == [url]
    assert config["BACKEND"] == "chatsite.redis_cluster.ClusterCache"
    broker, options = sentinel_celery_broker(url)
    assert broker == "rediscluster://a:7000/0"
    assert options == {"cluster_url": url, "global_keyprefix": "{celery}:"}
