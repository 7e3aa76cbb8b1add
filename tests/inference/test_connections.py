"""Redis clients of the inference tier (inference/connections.py)."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

from inference import client as inference_client
from inference import connections, keys, protocol
from inference.connections import redis_async, redis_async_new
from tests.faults import PrivateRedis


async def test_three_hundred_streams_block_in_xread_at_once_without_running_out():
    """Each open SSE stream holds a connection in a blocking XREAD; redis-py's default
    async pool (100 connections) raised MaxConnectionsError past 100 streams."""
    n = 300
    reads = [
        asyncio.create_task(
            inference_client.agen_read(
                job_id=f"conn-{i}", after=protocol.STREAM_START, block_ms=5000
            )
        )
        for i in range(n)
    ]
    await asyncio.sleep(0.5)  # all blocked
    client = redis_async()
    async with client.pipeline(transaction=False) as pipe:
        for i in range(n):
            pipe.xadd(keys.gen_key(f"conn-{i}"), protocol.token_fields(f"t{i}"))
        await pipe.execute()

    results = await asyncio.gather(*reads)

    assert [[e.data["t"] for e in events] for events in results] == [
        [f"t{i}"] for i in range(n)
    ]


def test_more_threads_than_sync_connections_wait_for_one_instead_of_failing(settings):
    """Under ASGI each request's sync steps run in a thread of its own, so a burst of
    settlements asks the process's sync client for more connections than its pool
    holds; redis-py's default pool raised MaxConnectionsError for the excess. Here 4
    connections serve 40 threads, each holding one for about 50 ms (BLPOP)."""
    settings.REDIS_SYNC_MAX_CONNECTIONS = 4
    settings.REDIS_SYNC_POOL_TIMEOUT_S = 10.0
    # another URL (same server and db): a client of its own, not the shared one
    url = settings.REDIS_URL + "?health_check_interval=0"
    try:
        client = connections.redis_sync(url)

        def slow(i: int) -> None:
            client.blpop([f"pool-test-{i}"], timeout=0.05)

        with ThreadPoolExecutor(max_workers=40) as pool:
            list(pool.map(slow, range(40)))  # raises if any call failed

        assert client.connection_pool.max_connections == 4
        assert len(client.connection_pool._connections) <= 4
    finally:
        connections._sync_clients.pop(url, None)


async def test_after_a_redis_restart_the_next_command_on_a_pooled_connection_works(
    tmp_path, settings
):
    """A restart leaves every pooled connection's socket dead. Clients built from a
    URL had no retry, so the first command on each failed with ConnectionError
    ("Connection closed by server"); now it is sent again on a fresh connection."""
    redis = PrivateRedis(tmp_path)
    try:
        async_client = redis_async_new(redis.url)
        sync_client = connections.redis_sync(redis.url)
        await async_client.set("k", "1")
        sync_client.set("k", "1")
        redis.stop()
        redis.start()

        async with async_client.pipeline(transaction=True) as pipe:
            pipe.set("k", "2").get("k")
            assert await pipe.execute() == [True, "2"]
        assert sync_client.get("k") == "2"
        await async_client.aclose()
    finally:
        connections._sync_clients.pop(redis.url, None)
        redis.stop()
