"""The stream hub (inference/streams.py): one reader per event loop for every
followed generation stream, against a real Redis."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import pytest
from django.conf import settings

from inference import keys, protocol, protocol_runs
from inference.connections import redis_async, redis_sync
from inference.streams import StreamHub
from inference.streams_subscription import StreamReadError
from tests.faults import PrivateRedis


async def _until(condition: Callable[[], bool], timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.005)


async def _write(job_id: str, *texts: str) -> list[str]:
    """Append token events; return their entry ids."""
    async with redis_async().pipeline(transaction=False) as pipe:
        for text in texts:
            pipe.xadd(keys.gen_key(job_id), protocol.token_fields(text))
        return await pipe.execute()


async def _text(read: Callable[[], Awaitable[list[protocol.Event]]], n: int) -> str:
    """Read until ``n`` token entries arrived (a busy hub joins a stream's tokens of
    one round into one event); return their text."""
    seen: list[str] = []
    tokens = 0
    while tokens < n:
        events = await read()
        seen += [e.data["t"] for e in events]
        tokens += sum(e.tokens for e in events)
    return "".join(seen)


def _blocked_clients(name_prefix: str = "") -> int:
    """Connections blocked in a command now (CLIENT LIST flag ``b``)."""
    return sum(
        1
        for c in redis_sync().client_list()
        if "b" in c.get("flags", "") and c.get("name", "").startswith(name_prefix)
    )


async def test_many_followers_are_read_by_one_xread_on_one_connection():
    hub = StreamHub(url=settings.REDIS_URL)
    n = 300
    others = _blocked_clients()  # other tests' readers may still be blocked
    subs = [
        hub.subscribe(job_id=f"many-{i}", after=protocol.STREAM_START) for i in range(n)
    ]
    await _until(lambda: _blocked_clients(f"stream-hub-{hub.hub_id}") == 1)
    await asyncio.sleep(0.1)
    # not one blocked connection per stream: 300 followers would show ~300 more; a
    # few other tests' readers may start or end blocking meanwhile
    assert _blocked_clients() < others + 10

    async with redis_async().pipeline(transaction=False) as pipe:
        for i in range(n):
            for text in (f"a{i}", f"b{i}"):
                pipe.xadd(keys.gen_key(f"many-{i}"), protocol.token_fields(text))
        await pipe.execute()
    got = await asyncio.gather(
        *(_text(lambda s=s: s.next(timeout_s=5), 2) for s in subs)
    )

    assert got == [f"a{i}b{i}" for i in range(n)]
    assert hub.rounds <= 3  # one round carries every stream's entries
    for sub in subs:
        sub.close()
    assert len(hub) == 0


async def test_a_follower_subscribing_while_the_reader_blocks_gets_its_first_event_at_once():
    hub = StreamHub(url=settings.REDIS_URL, block_ms=10_000)
    first = hub.subscribe(job_id="blocking", after=protocol.STREAM_START)
    await _until(lambda: hub._reading)
    await asyncio.sleep(0.05)  # the XREAD (10 s block) is pending at Redis

    late = hub.subscribe(job_id="late", after=protocol.STREAM_START)
    await _write("late", "hello")
    started = time.monotonic()
    events = await late.next(timeout_s=5)
    waited = time.monotonic() - started

    assert [e.data["t"] for e in events] == ["hello"]
    assert waited < 0.5, f"waited {waited:.3f} s of a 10 s block"
    assert hub.wakes == 1
    first.close()
    late.close()


async def test_cancelling_one_follower_detaches_it_and_leaves_the_others_reading():
    hub = StreamHub(url=settings.REDIS_URL)
    subs = [
        hub.subscribe(job_id=f"c-{i}", after=protocol.STREAM_START) for i in range(3)
    ]
    seen: dict[int, list[str]] = {i: [] for i in range(3)}

    async def follow(i: int) -> None:
        sub = subs[i]
        try:
            while True:
                seen[i] += [e.data["t"] for e in await sub.next(timeout_s=5)]
        finally:
            sub.close()

    tasks = [asyncio.create_task(follow(i)) for i in range(3)]
    for i in range(3):
        await _write(f"c-{i}", "one")
    await _until(lambda: all(seen[i] == ["one"] for i in range(3)))

    tasks[1].cancel()
    with pytest.raises(asyncio.CancelledError):
        await tasks[1]
    assert len(hub) == 2
    for i in range(3):
        await _write(f"c-{i}", "two")
    await _until(lambda: seen[0] == seen[2] == ["one", "two"])

    assert seen[1] == ["one"]
    for task in (tasks[0], tasks[2]):
        task.cancel()
    await asyncio.gather(tasks[0], tasks[2], return_exceptions=True)


async def test_redis_down_past_the_grace_fails_every_follower_and_the_next_one_reads(
    tmp_path,
):
    redis = PrivateRedis(tmp_path)
    try:
        hub = StreamHub(url=redis.url, error_grace_s=1)
        subs = [
            hub.subscribe(job_id=f"r-{i}", after=protocol.STREAM_START)
            for i in range(5)
        ]
        await _until(lambda: hub._reading)
        reads = [asyncio.create_task(s.next(timeout_s=30)) for s in subs]
        await asyncio.sleep(0.05)

        redis.stop()
        results = await asyncio.wait_for(
            asyncio.gather(*reads, return_exceptions=True), timeout=10
        )
        redis.start()

        assert all(isinstance(r, StreamReadError) for r in results), results
        assert len(hub) == 0
        again = hub.subscribe(job_id="r-again", after=protocol.STREAM_START)
        writer = redis_async(redis.url)
        await writer.xadd(keys.gen_key("r-again"), protocol.token_fields("back"))
        events: list[protocol.Event] = []
        deadline = time.monotonic() + 10
        while not events:
            assert time.monotonic() < deadline
            try:
                events = await again.next(timeout_s=1)
            except StreamReadError:  # the round that raced the restart
                again = hub.subscribe(job_id="r-again", after=protocol.STREAM_START)
        assert [e.data["t"] for e in events] == ["back"]
        again.close()
    finally:
        redis.stop()


async def test_followers_outlive_a_quick_redis_restart_and_read_on(tmp_path):
    """Redis restarts within the hub's error grace: every follower keeps its
    subscription and reads what is written after the restart, with no error."""
    redis = PrivateRedis(tmp_path)
    try:
        hub = StreamHub(url=redis.url, error_grace_s=10)
        subs = [
            hub.subscribe(job_id=f"q-{i}", after=protocol.STREAM_START)
            for i in range(3)
        ]
        await _until(lambda: hub._reading)
        reads = [asyncio.create_task(s.next(timeout_s=30)) for s in subs]
        redis.stop()
        await asyncio.sleep(0.5)  # the XREAD fails and is retried meanwhile
        redis.start()
        writer = redis_async(redis.url)
        for i in range(3):
            await writer.xadd(keys.gen_key(f"q-{i}"), protocol.token_fields(f"t{i}"))

        results = await asyncio.wait_for(asyncio.gather(*reads), timeout=10)

        assert [[e.data["t"] for e in events] for events in results] == [
            ["t0"],
            ["t1"],
            ["t2"],
        ]
        assert len(hub) == 3
        for sub in subs:
            sub.close()
    finally:
        redis.stop()


async def test_followers_resume_from_their_own_ids_on_one_stream():
    ids = await _write("resume", "a", "b", "c", "d")
    hub = StreamHub(url=settings.REDIS_URL)
    head = hub.subscribe(job_id="resume", after=ids[-1])
    await _until(lambda: hub._reading)
    # a second tab resuming with Last-Event-ID = the second entry, while the first
    # follower waits at the head of the same stream
    middle = hub.subscribe(job_id="resume", after=ids[1])

    assert [e.data["t"] for e in await middle.next(timeout_s=5)] == ["c", "d"]
    assert middle.after == ids[-1]
    await _write("resume", "e")
    assert [e.data["t"] for e in await head.next(timeout_s=5)] == ["e"]
    assert [e.data["t"] for e in await middle.next(timeout_s=5)] == ["e"]

    middle.seek(protocol.STREAM_START)  # a fallback restart reads from the start
    assert await _text(lambda: middle.next(timeout_s=5), 5) == "abcde"
    head.close()
    middle.close()


async def test_a_long_backlog_does_not_hold_back_another_stream():
    await _write("backlog", *[f"t{i}" for i in range(1000)])
    hub = StreamHub(url=settings.REDIS_URL, count=50)
    long = hub.subscribe(job_id="backlog", after=protocol.STREAM_START)
    short = hub.subscribe(job_id="fresh", after=protocol.STREAM_START)
    await _write("fresh", "now")

    assert [e.data["t"] for e in await short.next(timeout_s=5)] == ["now"]
    assert hub.rounds <= 2  # not after the 20 rounds the backlog takes
    backlog = await _text(lambda: long.next(timeout_s=5), 1000)
    assert backlog == "".join(f"t{i}" for i in range(1000))
    long.close()
    short.close()


async def test_a_follower_waits_for_its_timeout_and_gets_nothing_when_idle():
    hub = StreamHub(url=settings.REDIS_URL)
    sub = hub.subscribe(job_id="idle", after=protocol.STREAM_START)
    started = time.monotonic()
    assert await sub.next(timeout_s=0.2) == []
    assert 0.15 < time.monotonic() - started < 1.0
    sub.close()


async def _second_event_wait_s(hub: StreamHub, job_id: str) -> float:
    """Seconds from writing a stream's second event, just after its first was read,
    to the follower having it."""
    sub = hub.subscribe(job_id=job_id, after=protocol.STREAM_START)
    try:
        await _write(job_id, "meta")
        assert await _text(lambda: sub.next(timeout_s=5), 1) == "meta"
        await _write(job_id, "first token")
        started = time.monotonic()
        assert await _text(lambda: sub.next(timeout_s=5), 1) == "first token"
        return time.monotonic() - started
    finally:
        sub.close()


async def test_a_lightly_loaded_hub_does_not_hold_an_event_for_the_round_pause():
    """The pause between rounds (against re-sending thousands of keys) shrinks with
    the keys followed: one stream's first token, written just after its ``meta`` was
    read, is not held for the full pause."""
    light = StreamHub(url=settings.REDIS_URL, min_round_s=0.5, full_pace_keys=100)
    assert await _second_event_wait_s(light, "pace-light") < 0.2

    full = StreamHub(url=settings.REDIS_URL, min_round_s=0.5, full_pace_keys=1)
    assert await _second_event_wait_s(full, "pace-full") >= 0.3


async def test_a_held_stream_is_read_once_its_hold_ends_not_once_per_token():
    hub = StreamHub(url=settings.REDIS_URL)
    sub = hub.subscribe(job_id="held-1", after=protocol.STREAM_START)
    await _write("held-1", "first")
    assert await _text(lambda: sub.next(timeout_s=5), 1) == "first"
    loop = asyncio.get_running_loop()
    sub.due = loop.time() + 0.3  # the follower's coalescing pause
    rounds = hub.rounds
    for i in range(10):  # tokens a few ms apart, as an engine writes them
        await _write("held-1", f"t{i}")
        await asyncio.sleep(0.01)
    # not a round per token: the blocking read of t0, the joined read after the
    # hold, and an empty joined read after each (a busy round's next does not block)
    assert hub.rounds - rounds <= 4

    # a newcomer subscribing meanwhile is read; the held tokens all come after the hold
    other = hub.subscribe(job_id="held-2", after=protocol.STREAM_START)
    await _write("held-2", "hello")
    assert await _text(lambda: other.next(timeout_s=0.25), 1) == "hello"
    assert await _text(lambda: sub.next(timeout_s=5), 10) == "".join(
        f"t{i}" for i in range(10)
    )
    sub.close()
    other.close()


@pytest.mark.parametrize("joined", [True, False], ids=["script", "xread"])
async def test_a_busy_hub_reads_a_streams_tokens_of_a_round_as_one_event(joined):
    """Joined by the script (Redis 7), or in the process from XREAD's reply."""
    hub = StreamHub(
        url=settings.REDIS_URL, min_round_s=0.3, full_pace_keys=1, joined=joined
    )
    job = f"joined-{joined}"
    sub = hub.subscribe(job_id=job, after=protocol.STREAM_START)
    await _write(job, "warm")
    assert await _text(lambda: sub.next(timeout_s=5), 1) == "warm"
    # written while the hub paces its next round (0.3 s): one joined read takes them
    texts = ["a", ' "quoted" ', "back\\slash", "é", "\n", "z"]
    async with redis_async().pipeline(transaction=False) as pipe:
        for text in texts[:3]:
            pipe.xadd(keys.gen_key(job), protocol.token_fields(text))
        meta = protocol.event_fields(
            protocol.EVENT_META, {"model": "m", "worker": "w", "queue_ms": 0}
        )
        pipe.xadd(keys.gen_key(job), meta)
        for text in texts[3:]:
            pipe.xadd(keys.gen_key(job), protocol.token_fields(text))
        ids = await pipe.execute()

    events: list[protocol.Event] = []
    while not events or events[-1].id != ids[-1]:
        events += await sub.next(timeout_s=5)

    # runs of tokens whose JSON has no quote come joined, others one by one, in order
    assert [(e.type, e.data.get("t"), e.tokens, e.id) for e in events] == [
        (protocol.EVENT_TOKEN, "a", 1, ids[0]),
        (protocol.EVENT_TOKEN, ' "quoted" ', 1, ids[1]),
        (protocol.EVENT_TOKEN, "back\\slash", 1, ids[2]),
        (protocol.EVENT_META, None, 1, ids[3]),
        (protocol.EVENT_TOKEN, "é\nz", 3, ids[6]),
    ]
    assert sub.after == ids[-1]
    sub.close()


async def test_a_follower_behind_a_joined_run_gets_each_entry_once():
    """A second follower of the stream that subscribed at a later position than the
    round asked (mid-round) skips the round's joined runs, which may straddle its
    position, and reads its entries after that position in the next round."""
    ids = await _write("straddle", "a", "b", "c", "d")
    hub = StreamHub(url=settings.REDIS_URL)
    first = hub.subscribe(job_id="straddle", after=protocol.STREAM_START)
    run = protocol_runs.event_parse_run(ids[-1], 4, "abcd")
    late = hub.subscribe(job_id="straddle", after=ids[1])

    late._deliver((0, 0), [run], (int(ids[-1].split("-")[0]), 0))

    assert late._events == [] and late.after == ids[1]
    assert await _text(lambda: late.next(timeout_s=5), 2) == "cd"
    assert await _text(lambda: first.next(timeout_s=5), 4) == "abcd"
    first.close()
    late.close()
