"""Redis Sentinel URLs (chatsite/sentinel.py) and a failover drill: every Redis client
of the product follows the master a Sentinel names, before and after the master dies.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from celery import Celery
from django.core.cache import cache
from django.test import RequestFactory
from django_ratelimit.core import is_ratelimited

from chatsite.sentinel import (
    SentinelUrl,
    redis_cache_config,
    redis_caches,
    sentinel_celery_broker,
    sentinel_url_parse,
)
from inference import client as inference_client
from inference import keys, protocol
from inference.engines.scripted import ScriptedEngine
from inference.jobs import GenerationEnd
from tests.redis_sentinel import SentinelGroup

ANSWER = "one two three"


def test_a_sentinel_url_names_the_sentinels_service_database_and_passwords():
    parsed = sentinel_url_parse(
        "redis+sentinel://:s3cret@10.0.0.1:26379,10.0.0.2,[fd00::3]:26380"
        "/mymaster/2?sentinel_password=sp"
    )
    assert parsed == SentinelUrl(
        sentinels=(("10.0.0.1", 26379), ("10.0.0.2", 26379), ("fd00::3", 26380)),
        service_name="mymaster",
        db=2,
        password="s3cret",
        sentinel_password="sp",
    )
    assert parsed.connection_kwargs() == {"db": 2, "password": "s3cret"}
    assert parsed.sentinel_kwargs()["password"] == "sp"
    # a Sentinel host that is down without refusing must not hold a client for long
    assert parsed.sentinel_kwargs()["socket_connect_timeout"] <= 5


def test_a_plain_redis_url_is_not_a_sentinel_url_and_a_sentinel_url_needs_a_service():
    assert sentinel_url_parse("redis://127.0.0.1:6379/0") is None
    with pytest.raises(ValueError, match="service name"):
        sentinel_url_parse("redis+sentinel://127.0.0.1:26379")
    with pytest.raises(ValueError, match="Sentinel address"):
        sentinel_url_parse("redis+sentinel:///mymaster/0")


def test_celery_gets_kombus_sentinel_urls_and_the_master_name():
    broker, options = sentinel_celery_broker(
        "redis+sentinel://:pw@h1:26379,h2:26380/mymaster/3"
    )
    assert broker == "sentinel://:pw@h1:26379/3;sentinel://:pw@h2:26380/3"
    assert options["master_name"] == "mymaster"
    assert "password" not in options["sentinel_kwargs"]  # pw is the servers' one
    assert sentinel_celery_broker("redis://h:6379/1") == ("redis://h:6379/1", {})


def test_the_cache_of_a_sentinel_url_uses_the_sentinel_pool_and_one_location():
    config = redis_cache_config("redis+sentinel://a:1,b:2/m/0", key_prefix="c")
    # a string LOCATION would be split at the comma into two "servers"
    assert config["LOCATION"] == ["redis+sentinel://a:1,b:2/m/0"]
    assert config["OPTIONS"] == {
        "pool_class": "chatsite.sentinel.SentinelCachePool",
        "max_connections": 256,
    }
    plain = redis_cache_config("redis://a:1/0", key_prefix="c")
    assert plain["OPTIONS"]["pool_class"] == "redis.BlockingConnectionPool"


@pytest.fixture
def sentinel_group(tmp_path, settings) -> Iterator[SentinelGroup]:
    """A master, a replica and a Sentinel; the product's settings point at them."""
    group = SentinelGroup(tmp_path)
    try:
        settings.REDIS_URL = group.url
        settings.CACHES = redis_caches(group.url)
        broker = sentinel_celery_broker(group.url)  # as chatsite/settings/base.py
        settings.CELERY_BROKER_URL, settings.CELERY_BROKER_TRANSPORT_OPTIONS = broker
        yield group
    finally:
        group.stop()


def _generate() -> GenerationEnd:
    """One generation through the sync client, read again through the async one."""
    result = inference_client.generation_run(
        pool="default",
        messages=[{"role": "user", "content": "count"}],
        params={"max_tokens": 16},
        timeout_s=20,
    )
    assert result.complete and result.text == ANSWER, result

    async def read() -> list[protocol.Event]:
        return await inference_client.agen_read(
            job_id=result.job_id, after=protocol.STREAM_START, block_ms=100
        )

    events = asyncio.run(read())
    assert [e.type for e in events][-1] == protocol.EVENT_DONE
    return result


def _ratelimited(request) -> bool:
    return is_ratelimited(
        request, group="sentinel-drill", key="ip", rate="2/h", increment=True
    )


def _broker_round_trip(group: SentinelGroup, *, master_port: int, body: str) -> None:
    """Publish and consume one message on the broker of a Celery app configured as
    chatsite/celery.py is (the CELERY_ settings); the queue lives on the server at
    ``master_port`` while the message waits."""
    app = Celery("sentinel-drill", set_as_current=False)
    app.config_from_object("django.conf:settings", namespace="CELERY")
    with app.connection_for_write() as connection:
        queue = connection.SimpleQueue("sentinel-drill")
        queue.put({"body": body})
        assert group.server(master_port).llen("sentinel-drill") == 1
        message = queue.get(timeout=10)
        message.ack()
        assert message.payload == {"body": body}
        queue.close()


@pytest.mark.slow
def test_every_redis_client_reaches_the_new_master_after_the_old_one_is_killed(
    sentinel_group, start_worker
):
    group = sentinel_group
    start_worker(ScriptedEngine(text=ANSWER))
    request = RequestFactory().get("/", REMOTE_ADDR="192.0.2.7")

    first = _generate()
    cache.set("drill", "before")
    assert [_ratelimited(request), _ratelimited(request)] == [False, False]
    _broker_round_trip(group, master_port=group.master_port, body="before")
    old = group.server(group.master_port)
    assert old.exists(keys.gen_key(first.job_id))  # the master holds it

    group.kill_master()

    # The same process-wide clients (and the worker's) now reach the promoted replica.
    second = _generate()
    new = group.server(group.replica_port)
    assert new.exists(keys.gen_key(first.job_id), keys.gen_key(second.job_id))
    assert cache.get("drill") == "before"
    cache.set("drill", "after")
    assert new.keys("*drill*") and cache.get("drill") == "after"
    assert _ratelimited(request) is True  # the count survived the failover
    _broker_round_trip(group, master_port=group.replica_port, body="after")
