"""The ``openai`` engine reads the body in the task that iterates ``generate``
(inference/engines/openai.py): :meth:`OpenAIEngine.abort` cancels that task while it
waits on the server and takes the cancel back (the stream ends cancelled), while a
cancel from outside still cancels the task."""

from __future__ import annotations

import asyncio
import json

import pytest

from inference.engines.base import Delta, Finish
from inference.engines.openai import OpenAIEngine
from inference.protocol import Job
from tests.inference.helpers import request_read


async def _serve_stalled(closed: asyncio.Event) -> asyncio.Server:
    """A server that answers one content chunk, then sends nothing more; sets
    ``closed`` when the client goes away."""

    async def handle(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        await request_read(reader)
        chunk = {"choices": [{"index": 0, "delta": {"content": "hi"}}]}
        body = f"data: {json.dumps(chunk)}\n\n".encode()
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"transfer-encoding: chunked\r\n\r\n"
            + f"{len(body):x}\r\n".encode()
            + body
            + b"\r\n"
        )
        await writer.drain()
        await reader.read()  # until the client closes
        closed.set()
        writer.close()

    return await asyncio.start_server(handle, "127.0.0.1", 0)


async def _stalled_engine() -> tuple[OpenAIEngine, asyncio.Server, asyncio.Event]:
    closed = asyncio.Event()
    server = await _serve_stalled(closed)
    port = server.sockets[0].getsockname()[1]
    engine = OpenAIEngine(base_url=f"http://127.0.0.1:{port}", model="remote")
    await engine.start()
    return engine, server, closed


def _job(job_id: str) -> Job:
    return Job(job_id=job_id, messages=[{"role": "user", "content": "hi"}])


async def _consuming(
    engine: OpenAIEngine, job_id: str
) -> tuple[asyncio.Task[None], list[object]]:
    """A task iterating ``engine.generate`` for ``job_id``, once it has the first
    delta and generate waits on the stalled server again; the items it got."""
    items: list[object] = []

    async def consume() -> None:
        async for item in engine.generate(_job(job_id)):
            items.append(item)

    task = asyncio.create_task(consume())
    while not items:
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.05)  # generate now waits on the server
    return task, items


async def _abort_while_waiting() -> tuple[list[object], bool, int]:
    engine, server, closed = await _stalled_engine()
    try:
        task, items = await _consuming(engine, "stalled")
        engine.abort("stalled")
        await asyncio.wait_for(task, 5)
        await asyncio.wait_for(closed.wait(), 5)
        return items, task.cancelled(), task.cancelling()
    finally:
        await engine.close()
        server.close()


def test_abort_while_waiting_on_the_server_ends_cancelled_and_closes_the_stream():
    items, cancelled, cancelling = asyncio.run(_abort_while_waiting())
    assert items[0] == Delta("hi")
    finish = items[-1]
    assert isinstance(finish, Finish) and finish.finish_reason == "cancelled"
    assert finish.usage.completion_tokens == 1
    assert not cancelled and cancelling == 0  # the cancel was taken back


async def _cancel_from_outside() -> tuple[list[object], bool]:
    engine, server, closed = await _stalled_engine()
    try:
        task, items = await _consuming(engine, "outside")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.wait_for(closed.wait(), 5)
        return items, task.cancelled()
    finally:
        await engine.close()
        server.close()


def test_a_cancel_from_outside_cancels_the_reading_task():
    items, cancelled = asyncio.run(_cancel_from_outside())
    assert items == [Delta("hi")]
    assert cancelled


async def _abort_and_cancel() -> bool:
    engine, server, closed = await _stalled_engine()
    try:
        task, items = await _consuming(engine, "both")
        engine.abort("both")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return task.cancelled()
    finally:
        await engine.close()
        server.close()


def test_abort_and_a_cancel_from_outside_together_still_cancel_the_task():
    assert asyncio.run(_abort_and_cancel())
