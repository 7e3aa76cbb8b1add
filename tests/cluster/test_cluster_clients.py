"""Every Redis client of the product on a Redis Cluster: the stream hub (one reader
per master), Django's cache and django-ratelimit, pattern scans over every master,
and Celery's broker, before and after a master fails over."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Callable

import pytest
from celery import Celery
from django.core.cache import cache
from django.test import RequestFactory
from django_ratelimit.core import is_ratelimited
from redis.cluster import ClusterNode

from chatsite.kombu_cluster import KEY_PREFIX
from gateway import quota
from inference import client as inference_client
from inference import keys, protocol
from inference.connections import redis_async, redis_sync
from inference.streams import stream_hub
from inference.streams_cluster import ClusterStreamHub
from tests.redis_cluster import RedisClusterGroup

pytestmark = pytest.mark.cluster


async def _until(condition: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.005)


async def _write(key: str, text: str) -> str:
    """Append a token event to the stream ``key``; return its entry id."""
    return await redis_async().xadd(key, protocol.token_fields(text))


def _evalsha_calls(group: RedisClusterGroup, port: int) -> int:
    stats = group.nodes[port].client().info("commandstats")
    return int(stats.get("cmdstat_evalsha", {}).get("calls", 0))


async def test_the_hub_reads_each_master_with_one_command_a_round(on_cluster):
    hub = stream_hub()
    assert isinstance(hub, ClusterStreamHub)
    jobs = [f"spread-{i}" for i in range(60)]
    subs = [hub.subscribe(job_id=j, after=protocol.STREAM_START) for j in jobs]
    masters = {on_cluster.master_of(sub.key) for sub in subs}
    assert len(masters) == 3  # the streams lie on every master
    before = {port: _evalsha_calls(on_cluster, port) for port in masters}
    for j, sub in zip(jobs, subs, strict=True):
        await _write(sub.key, f"t-{j}")
    got: dict[str, list[str]] = {j: [] for j in jobs}
    deadline = time.monotonic() + 10
    while any(not v for v in got.values()):
        assert time.monotonic() < deadline, [j for j, v in got.items() if not v]
        for j, sub in zip(jobs, subs, strict=True):
            got[j] += [e.data["t"] for e in await sub.next(timeout_s=0.01)]
    assert got == {j: [f"t-{j}"] for j in jobs}
    # one reader per master, each reading all of its streams with one command
    assert {int(name.rsplit(":", 1)[1]) for name in hub._readers} == masters
    calls = sum(_evalsha_calls(on_cluster, p) - before[p] for p in masters)
    # a round is one command, whatever its streams (+ one in flight per reader)
    assert 3 <= calls <= hub.rounds + len(masters)
    for sub in subs:
        sub.close()
    await _until(lambda: not hub._readers)  # readers end when nobody follows


async def test_a_new_follower_gets_its_first_event_within_a_poll():
    hub = stream_hub()
    idle = hub.subscribe(job_id="idle", after=protocol.STREAM_START)
    await asyncio.sleep(0.1)  # the readers poll: nothing there
    sub = hub.subscribe(job_id="fresh", after=protocol.STREAM_START)
    started = time.monotonic()
    await _write(sub.key, "first")
    events = await sub.next(timeout_s=5)
    assert [e.data["t"] for e in events] == ["first"]
    assert time.monotonic() - started < 1.0
    sub.close()
    idle.close()


async def test_followers_outlive_a_master_failover_and_read_on(on_cluster):
    hub = stream_hub()
    jobs = [f"fo-{i}" for i in range(12)]
    subs = {j: hub.subscribe(job_id=j, after=protocol.STREAM_START) for j in jobs}
    for sub in subs.values():
        await _write(sub.key, "before")
    victim = on_cluster.master_of(subs[jobs[0]].key)
    on_victim = [j for j in jobs if on_cluster.master_of(subs[j].key) == victim]
    got: dict[str, list[str]] = {j: [] for j in jobs}

    async def read_all(want: int) -> None:
        deadline = time.monotonic() + 30
        while any(len(v) < want for v in got.values()):
            assert time.monotonic() < deadline, got
            for j, sub in subs.items():
                got[j] += [e.data["t"] for e in await sub.next(timeout_s=0.01)]

    await read_all(1)
    await asyncio.to_thread(on_cluster.kill_master, victim)
    for sub in subs.values():  # the product's client follows the promoted replica
        await _write(sub.key, "after")
    await read_all(2)
    assert got == {j: ["before", "after"] for j in jobs}
    assert on_victim  # the killed master held some of them
    for sub in subs.values():
        sub.close()


def test_the_cache_and_rate_limits_work_across_slots(on_cluster):
    values = {f"cache-{i}": i for i in range(40)}
    cache.set_many(values, timeout=60)
    assert cache.get_many(list(values)) == values
    assert cache.get("cache-7") == 7
    assert cache.incr("cache-7") == 8
    cache.delete_many(["cache-1", "cache-2"])
    assert cache.get_many(["cache-1", "cache-2", "cache-3"]) == {"cache-3": 3}
    assert cache.add("cache-new", "x", timeout=60) and not cache.add("cache-new", "y")
    request = RequestFactory().get("/", REMOTE_ADDR="192.0.2.9")

    def limited() -> bool:
        return is_ratelimited(
            request, group="cluster", key="ip", rate="2/h", increment=True
        )

    assert [limited(), limited(), limited()] == [False, False, True]
    cache.clear()
    assert cache.get("cache-3") is None


def test_a_pattern_scan_finds_the_keys_of_every_master(on_cluster):
    client = redis_sync()
    names = [f"scan:{i}" for i in range(50)]
    for name in names:
        client.set(name, "1")
    client.set("other", "1")
    assert len({on_cluster.master_of(n) for n in names}) == 3
    # redis-py's cluster SCAN walks every master (what the product's scans call)
    assert sorted(client.scan_iter(match="scan:*")) == sorted(names)
    assert sorted(client.scan_iter(match="scan:*", count=7, _type="string")) == sorted(
        names
    )


def _broker_round_trip(body: str) -> None:
    """Publish and consume one message on the broker of a Celery app configured as
    chatsite/celery.py is (the CELERY_ settings)."""
    app = Celery("cluster-drill", set_as_current=False)
    app.config_from_object("django.conf:settings", namespace="CELERY")
    with app.connection_for_write() as connection:
        queue = connection.SimpleQueue("cluster-drill")
        queue.put({"body": body})
        message = queue.get(timeout=10)
        message.ack()
        assert message.payload == {"body": body}
        queue.close()


def test_celerys_broker_lives_in_one_slot_and_follows_its_failover(on_cluster):
    _broker_round_trip("before")
    owner = on_cluster.master_of(KEY_PREFIX)
    keys = on_cluster.nodes[owner].client().keys("*")
    assert keys and all(k.startswith(KEY_PREFIX) for k in keys)  # kombu's, tagged
    on_cluster.kill_master(owner)
    _broker_round_trip("after")


def test_a_pipeline_sends_each_script_to_the_master_of_its_keys(on_cluster):
    client = redis_sync()
    with client.pipeline(transaction=False) as pipe:
        pipe.set("{pipe}:a", "1")
        pipe.eval("return redis.call('INCR', KEYS[1])", 1, "{pipe}:a")
        pipe.eval("return redis.call('GET', KEYS[1])", 1, "elsewhere")
        assert pipe.execute() == [True, 2, None]
    assert on_cluster.master_of("{pipe}:a") != on_cluster.master_of("elsewhere")


def test_a_pipelines_scripts_do_not_need_the_default_node(on_cluster):
    # After a failover the client's default node may be the dead master: a
    # pipeline's scripts must still reach the masters of their keys (the settlement's
    # read of the failover drill failed there, ConnectionError at every retry).
    client = redis_sync()
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        dead = ClusterNode("127.0.0.1", closed.getsockname()[1])
    client.nodes_manager.create_redis_connections([dead])
    alive = client.get_default_node()
    client.nodes_manager.default_node = dead
    try:
        with client.pipeline(transaction=False) as pipe:
            pipe.eval("return redis.call('INCR', KEYS[1])", 1, "{dead}:a")
            pipe.eval("return redis.call('INCR', KEYS[1])", 1, "elsewhere")
            assert pipe.execute() == [1, 1]
    finally:
        client.nodes_manager.default_node = alive


def test_a_batchs_streams_and_quotas_are_read_and_settled_across_slots(on_cluster):
    """The bulk settlement's two pipelines (gateway/generations/settle_bulk.py): the
    streams of many jobs read, and the reservations of many users settled, wherever
    their slots are."""
    client = redis_sync()
    jobs = [f"bulk-{i}" for i in range(8)]
    for job_id in jobs:
        client.xadd(keys.gen_key(job_id), protocol.token_fields(job_id))
    masters = {on_cluster.master_of(keys.gen_key(j)) for j in jobs}
    limits = quota.Limits(per_day=1000)
    for user_id, job_id in enumerate(jobs, start=1):
        quota.quota_reserve(user_id=user_id, job_id=job_id, tokens=50, limits=limits)

    streams = inference_client.generation_events_many(job_ids=jobs)
    reserved = quota.quota_settle_many(
        [(user_id, job_id, 7) for user_id, job_id in enumerate(jobs, start=1)]
    )

    assert len(masters) > 1
    assert [[e.data["t"] for e in events] for events in streams] == [[j] for j in jobs]
    assert reserved == [50] * len(jobs)
    assert [
        quota.quota_windows(user_id=user_id, limits=limits)[1].used
        for user_id in range(1, len(jobs) + 1)
    ] == [7] * len(jobs)
    assert quota.quota_settle_many([(1, jobs[0], 7)]) == [None]  # once
