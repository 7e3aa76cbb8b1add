"""Redis clients of the inference tier (inference/connections.py)."""

from __future__ import annotations

import asyncio

from inference import client as inference_client
from inference import protocol
from inference.connections import redis_async


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
            pipe.xadd(protocol.gen_key(f"conn-{i}"), protocol.token_fields(f"t{i}"))
        await pipe.execute()

    results = await asyncio.gather(*reads)

    assert [[e.data["t"] for e in events] for events in results] == [
        [f"t{i}"] for i in range(n)
    ]
