"""Answers shared by a process's followers (inference/waiting.py), on a real Redis."""

from __future__ import annotations

import asyncio
import time

from inference import client as inference_client
from inference import keys, protocol, waiting
from inference.connections import redis_sync


def _calls(command: str) -> int:
    stats = redis_sync().info("commandstats").get(f"cmdstat_{command}", {})
    return int(stats.get("calls", 0))


def _enqueue(pool: str, n: int) -> list[str]:
    jobs = [protocol.new_job_id() for _ in range(n)]
    for job_id in jobs:
        job = protocol.Job(
            job_id=job_id, messages=[], params={}, enqueued_at=time.time()
        )
        inference_client.job_enqueue(pool=pool, job=job)
    return jobs


async def test_pool_liveness_is_asked_once_for_all_followers_of_a_loop():
    redis_sync().zadd(keys.workers_key("live"), {"w1": time.time()})
    redis_sync().config_resetstat()

    answers = await asyncio.gather(
        *(waiting.aworkers_live(pool="live") for _ in range(200))
    )

    assert answers == [1] * 200
    assert _calls("zcount") == 1


async def test_pool_liveness_is_asked_again_once_the_answer_is_old():
    assert await waiting.aworkers_live(pool="gone", max_age_s=0.05) == 0
    redis_sync().zadd(keys.workers_key("gone"), {"w1": time.time()})
    assert await waiting.aworkers_live(pool="gone", max_age_s=0.05) == 0  # cached
    await asyncio.sleep(0.1)
    assert await waiting.aworkers_live(pool="gone", max_age_s=0.05) == 1


async def test_shared_queue_positions_match_the_exact_ones_with_one_call_per_pool():
    jobs = _enqueue("wait", 5)
    key = keys.queue_key("wait")
    redis_sync().xgroup_create(key, protocol.GROUP, id="0")
    redis_sync().xreadgroup(protocol.GROUP, "fake", {key: ">"}, count=2)  # running
    redis_sync().config_resetstat()

    shared = await asyncio.gather(
        *(waiting.aqueue_position_shared(pool="wait", job_id=j) for j in jobs)
    )

    assert _calls("eval") == 1
    exact = [await waiting.aqueue_position(pool="wait", job_id=j) for j in jobs]
    assert shared == exact == [0, 0, 1, 2, 3]
    unknown = protocol.new_job_id()
    assert await waiting.aqueue_position_shared(pool="wait", job_id=unknown) == 0
    assert await waiting.aqueue_position_shared(pool="none", job_id=jobs[0]) == 0


async def test_a_job_past_the_scan_reads_as_further_back(monkeypatch):
    monkeypatch.setattr(waiting, "QUEUE_POSITION_SCAN_MAX", 3)
    jobs = _enqueue("long", 5)

    places = [await waiting.aqueue_position_shared(pool="long", job_id=j) for j in jobs]

    assert places == [1, 2, 3, 4, 4]
