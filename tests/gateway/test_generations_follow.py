"""Following a generation through the process's stream hub (gateway/generations/
follow.py): frames coalesced by time, the first token not held, followers detached."""

from __future__ import annotations

import asyncio
import time
from contextlib import aclosing

import pytest
from asgiref.sync import sync_to_async

from gateway import generations
from inference import client as inference_client
from inference import protocol, streams
from inference.engines.scripted import ScriptedEngine

pytestmark = pytest.mark.django_db(transaction=True)


async def _api_generation(user, max_tokens: int) -> generations.Generation:
    started = await sync_to_async(generations.generation_start)(
        generations.GenerationRequest(
            user=user,
            messages=[{"role": "user", "content": "hi"}],
            params={"max_tokens": max_tokens},
            surface=generations.Surface.API,
        )
    )
    return started.generation


async def test_deltas_come_at_most_once_per_coalesce_interval_the_first_at_once(
    user, start_worker, settings
):
    settings.SSE_COALESCE_MS = 400
    start_worker(ScriptedEngine(text="w " * 100, delay_ms=20))
    generation = await _api_generation(user, max_tokens=60)  # about 1.2 s of tokens
    deltas: list[tuple[float, float, generations.Delta]] = []  # (monotonic, wall, item)
    async with aclosing(generations.generation_follow(generation)) as items:
        async for item in items:
            if isinstance(item, generations.Delta):
                deltas.append((time.monotonic(), time.time(), item))
            if isinstance(item, generations.Ended):
                outcome = item.outcome
                break

    events = inference_client.generation_events(job_id=generation.job_id)
    tokens = [e for e in events if e.type == protocol.EVENT_TOKEN]
    assert "".join(d.text for _, _, d in deltas) == "".join(e.data["t"] for e in tokens)
    assert sum(d.tokens for _, _, d in deltas) == len(tokens) == 60
    assert outcome.usage.completion_tokens == 60
    # the first token is released when it arrives, not after an interval
    first_entry_s = int(deltas[0][2].event_id.split("-")[0]) / 1000
    assert deltas[0][1] - first_entry_s < 0.3
    # then one frame per interval at most, each carrying what arrived meanwhile
    gaps = [b[0] - a[0] for a, b in zip(deltas, deltas[1:], strict=False)]
    assert gaps and min(gaps) >= 0.39, gaps
    assert len(deltas) <= 6  # 60 tokens in ~1.2 s, 20 ms apart: not 60 frames


@pytest.mark.parametrize(
    ("open_streams", "interval_ms"),
    [(0, 50), (1, 50), (400, 50), (800, 100), (1000, 125), (2000, 200), (10000, 200)],
)
def test_the_coalesce_interval_grows_with_the_streams_a_process_follows(
    settings, open_streams, interval_ms
):
    """SSE_COALESCE_MS (50) up to 400 streams, then open streams / SSE_FRAMES_PER_S
    (8,000 frames/s over the process), capped at SSE_COALESCE_MAX_MS (200)."""
    settings.SSE_COALESCE_MS = 50
    settings.SSE_FRAMES_PER_S = 8000
    settings.SSE_COALESCE_MAX_MS = 200
    got = generations.coalesce_interval_s(open_streams)
    assert got == pytest.approx(interval_ms / 1000)


async def test_under_load_each_stream_gets_fewer_frames(user, start_worker, settings):
    """With the process's frame budget at 5 frames/s and two streams followed (this
    one and another), a stream's deltas come 0.4 s apart, not SSE_COALESCE_MS."""
    settings.SSE_COALESCE_MS = 20
    settings.SSE_FRAMES_PER_S = 5
    settings.SSE_COALESCE_MAX_MS = 1000
    start_worker(ScriptedEngine(text="w " * 100, delay_ms=20))
    generation = await _api_generation(user, max_tokens=60)  # about 1.2 s of tokens
    other = streams.stream_hub().subscribe(job_id="someone-else", after="0-0")
    stamps: list[float] = []
    try:
        async with aclosing(generations.generation_follow(generation)) as items:
            async for item in items:
                if isinstance(item, generations.Delta):
                    stamps.append(time.monotonic())
                if isinstance(item, generations.Ended):
                    break
    finally:
        other.close()
    gaps = [b - a for a, b in zip(stamps, stamps[1:], strict=False)]
    assert gaps and min(gaps) >= 0.39, gaps
    assert len(stamps) <= 5


async def test_a_follower_that_leaves_detaches_from_the_hub_and_others_go_on(
    user, start_worker, settings
):
    start_worker(ScriptedEngine(text="w " * 100, delay_ms=20))
    first = await _api_generation(user, max_tokens=40)
    second = await _api_generation(user, max_tokens=40)
    hub = streams.stream_hub()

    async def read(generation: generations.Generation, stop_after: int | None) -> int:
        seen = 0
        async with aclosing(generations.generation_follow(generation)) as items:
            async for item in items:
                if isinstance(item, generations.Delta):
                    seen += item.tokens
                    if stop_after is not None and seen >= stop_after:
                        raise asyncio.CancelledError  # the client went away
                if isinstance(item, generations.Ended):
                    return seen
        return seen

    leaving = asyncio.create_task(read(first, stop_after=1))
    staying = asyncio.create_task(read(second, stop_after=None))
    with pytest.raises(asyncio.CancelledError):
        await leaving
    assert len(hub) <= 1  # only the follower that stays

    assert await staying == 40
    assert len(hub) == 0
