"""The ``openai`` engine keeps its connections (inference/engines/openai.py): a
response read to the end of its body after ``[DONE]`` hands its connection back to
the pool, so jobs one after another share one connection to the server."""

from __future__ import annotations

import asyncio
import json

from inference.engines.base import Delta, Finish
from inference.engines.openai import OpenAIEngine
from inference.protocol import Job
from tests.inference.helpers import request_read


def _sse(answer: str) -> bytes:
    chunk = {"choices": [{"index": 0, "delta": {"content": answer}}]}
    end = {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
    return (
        f"data: {json.dumps(chunk)}\n\ndata: {json.dumps(end)}\n\ndata: [DONE]\n\n"
    ).encode()


async def _serve(connections: list[int]) -> asyncio.Server:
    """A keep-alive HTTP/1.1 server: answers every request on a connection with a
    chunked SSE answer; counts its connections in ``connections``."""

    async def handle(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        connections.append(1)
        try:
            while True:
                await request_read(reader)
                body = _sse("hi")
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                    b"transfer-encoding: chunked\r\n\r\n"
                )
                writer.write(f"{len(body):x}\r\n".encode() + body + b"\r\n")
                await writer.drain()
                await asyncio.sleep(0.01)  # the body's end comes after [DONE]
                writer.write(b"0\r\n\r\n")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    return await asyncio.start_server(handle, "127.0.0.1", 0)


async def _jobs_in_turn(n: int) -> tuple[list[list[object]], int]:
    connections: list[int] = []
    server = await _serve(connections)
    port = server.sockets[0].getsockname()[1]
    engine = OpenAIEngine(base_url=f"http://127.0.0.1:{port}", model="remote")
    await engine.start()
    try:
        answers = []
        for i in range(n):
            job = Job(job_id=f"j{i}", messages=[{"role": "user", "content": "hi"}])
            answers.append([item async for item in engine.generate(job)])
    finally:
        await engine.close()
        server.close()
    return answers, len(connections)


def test_jobs_one_after_another_reuse_one_connection():
    answers, connections = asyncio.run(_jobs_in_turn(3))
    for items in answers:
        assert items[0] == Delta("hi")
        assert isinstance(items[-1], Finish) and items[-1].finish_reason == "stop"
    assert connections == 1


async def _serve_open_body() -> asyncio.Server:
    """A server that sends an answer with [DONE] and never ends the chunked body."""

    async def handle(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        await reader.readuntil(b"\r\n\r\n")
        body = _sse("hi")
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"transfer-encoding: chunked\r\n\r\n"
        )
        writer.write(f"{len(body):x}\r\n".encode() + body + b"\r\n")
        await writer.drain()
        try:
            await reader.read()  # hold the body open until the client leaves
        finally:
            writer.close()

    return await asyncio.start_server(handle, "127.0.0.1", 0)


async def _one_job_open_body() -> tuple[list[object], float]:
    server = await _serve_open_body()
    port = server.sockets[0].getsockname()[1]
    engine = OpenAIEngine(base_url=f"http://127.0.0.1:{port}", model="remote")
    await engine.start()
    loop = asyncio.get_running_loop()
    try:
        started = loop.time()
        job = Job(job_id="open", messages=[{"role": "user", "content": "hi"}])
        items = [item async for item in engine.generate(job)]
        return items, loop.time() - started
    finally:
        await engine.close()
        server.close()


def test_a_body_left_open_after_done_still_ends_the_answer(monkeypatch):
    """The drain after [DONE] is bounded: a server that keeps the body open costs
    DRAIN_S, not the read timeout, and the answer still ends complete."""
    monkeypatch.setattr("inference.engines.openai.DRAIN_S", 0.2)
    items, took = asyncio.run(_one_job_open_body())
    assert items[0] == Delta("hi")
    assert isinstance(items[-1], Finish) and items[-1].finish_reason == "stop"
    assert took < 5.0  # the read timeout is 120 s
