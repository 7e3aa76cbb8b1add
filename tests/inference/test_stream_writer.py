"""The worker's token writer (inference/stream_writer.py): every running job's events
in one round trip, each job's in order, a failed write failing only its jobs."""

from __future__ import annotations

import asyncio

import pytest

from inference.stream_writer import StreamWriter, TokenWriter


class Recorder:
    """A publish that records each call's batches; ``fail`` names jobs to fail."""

    def __init__(self, fail: frozenset[str] = frozenset()) -> None:
        self.calls: list[dict[str, list[str]]] = []
        self.fail = fail
        self.gate = asyncio.Event()
        self.gate.set()

    async def __call__(self, batches):
        await self.gate.wait()
        self.calls.append({job: [f["d"] for f in evs] for job, evs in batches.items()})
        return {job: RuntimeError(f"{job} lost") for job in batches if job in self.fail}


def test_tokens_of_many_jobs_go_in_one_round_trip_each_job_in_order():
    async def run():
        publish = Recorder()
        writer = StreamWriter(publish)
        a, b = TokenWriter(writer, "a"), TokenWriter(writer, "b")
        for i in range(3):
            a.add(f"a{i}")
            b.add(f"b{i}")
        await a.flushed()
        await b.flushed()
        return publish.calls

    calls = asyncio.run(run())
    assert len(calls) == 1
    assert [c.split('"')[3] for c in calls[0]["a"]] == ["a0", "a1", "a2"]
    assert [c.split('"')[3] for c in calls[0]["b"]] == ["b0", "b1", "b2"]


def test_tokens_added_during_a_write_go_in_the_next_one_after_it():
    async def run():
        publish = Recorder()
        publish.gate.clear()
        writer = StreamWriter(publish)
        a = TokenWriter(writer, "a")
        a.add("first")
        await asyncio.sleep(0)  # the flush has started and waits on the gate
        a.add("second")
        TokenWriter(writer, "b").add("other")
        publish.gate.set()
        await a.flushed()
        return publish.calls

    calls = asyncio.run(run())
    assert [sorted(c) for c in calls] == [["a"], ["a", "b"]]
    assert [len(c["a"]) for c in calls] == [1, 1]


def test_a_failed_write_fails_only_its_job():
    async def run():
        publish = Recorder(fail=frozenset({"a"}))
        writer = StreamWriter(publish)
        a, b = TokenWriter(writer, "a"), TokenWriter(writer, "b")
        a.add("x")
        b.add("y")
        await b.flushed()
        with pytest.raises(RuntimeError, match="a lost"):
            await a.flushed()
        with pytest.raises(RuntimeError, match="a lost"):
            a.add("z")
        b.add("w")
        await b.flushed()
        await a.close()
        publish.fail = frozenset()
        a.add("after close")  # a new job under the same id starts clean
        await a.flushed()

    asyncio.run(run())


def test_a_cancelled_wait_leaves_the_shared_write_running():
    async def run():
        publish = Recorder()
        publish.gate.clear()
        writer = StreamWriter(publish)
        a, b = TokenWriter(writer, "a"), TokenWriter(writer, "b")
        a.add("x")
        b.add("y")
        waiter = asyncio.create_task(a.flushed())
        await asyncio.sleep(0.01)
        waiter.cancel()
        await asyncio.gather(waiter, return_exceptions=True)
        publish.gate.set()
        await b.flushed()
        return publish.calls

    assert asyncio.run(run()) == [{"a": ['{"t": "x"}'], "b": ['{"t": "y"}']}]
