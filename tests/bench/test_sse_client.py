"""bench/sse_client.py against bench/upstream.py: the light client reads the whole
answer to [DONE] over kept-alive connections, times the first content delta, and
reads the same answer the official openai client does. No service needed."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket

import pytest

from bench import upstream
from bench.sse_client import RawClient, StreamError


@contextlib.asynccontextmanager
async def _upstream():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = await asyncio.get_running_loop().create_server(
        upstream.Upstream, "127.0.0.1", port
    )
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        server.close()


def test_the_raw_client_reads_the_answer_to_done_and_reuses_its_connection():
    async def main():
        async with _upstream() as url:
            client = RawClient(url, "none", max_connections=2)
            first = await client.stream("bench-fixed")
            second = await client.stream("bench-fixed")
            assert client.opened == 1  # the same connection, kept alive
            await client.close()
            return first, second

    for ttft, total, cid, made, first_at, wire in asyncio.run(main()):
        assert cid == "chatcmpl-up"
        # the first content delta comes one token delay after the role chunk, the
        # end after all of them
        assert upstream.DELAY_S * 1000 <= ttft < total
        assert total >= upstream.TOKENS * upstream.DELAY_S * 1000
        assert made <= wire < first_at


def test_the_official_client_reads_the_same_answer_from_the_upstream():
    import openai

    async def main():
        async with _upstream() as url:
            client = openai.AsyncOpenAI(base_url=url, api_key="none", max_retries=0)
            stream = await client.chat.completions.create(
                model="bench-fixed",
                messages=[{"role": "user", "content": "hi"}],
                stream=True,
            )
            chunks = [chunk async for chunk in stream]
            await client.close()
            return chunks

    chunks = asyncio.run(main())
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "".join(f" tok{i}" for i in range(upstream.TOKENS))
    assert chunks[-1].usage.completion_tokens == upstream.TOKENS


def test_an_error_status_is_raised_with_its_body():
    async def main():
        async with _upstream() as url:
            client = RawClient(url.replace("/v1", "/nowhere"), "none", 1)
            await client.stream("bench-fixed")

    with pytest.raises(StreamError, match="HTTP 404"):
        asyncio.run(main())


def test_a_body_without_done_is_an_error():
    async def serve(reader, writer):
        await reader.readuntil(b"\r\n\r\n")
        event = json.dumps({"id": "x", "choices": [{"delta": {"content": "a"}}]})
        body = f"data: {event}\n\n".encode()
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % len(body))
        writer.write(body)
        await writer.drain()
        writer.close()

    async def main():
        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with server:
            client = RawClient(f"http://127.0.0.1:{port}/v1", "k", 1)
            await client.stream("m")

    with pytest.raises(StreamError, match=r"without \[DONE\]"):
        asyncio.run(main())


def test_a_kept_alive_connection_the_server_closed_is_replaced():
    async def serve(reader, writer):
        # one answer per connection, then closed without saying so (a server's
        # keep-alive timeout running out between two rounds)
        await reader.readuntil(b"\r\n\r\n")
        event = json.dumps({"id": "x", "choices": [{"delta": {"content": "a"}}]})
        body = f"data: {event}\n\ndata: [DONE]\n\n".encode()
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % len(body))
        writer.write(body)
        await writer.drain()
        writer.close()

    async def main():
        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with server:
            client = RawClient(f"http://127.0.0.1:{port}/v1", "k", 1)
            answers = [await client.stream("m") for _ in range(3)]
            await client.close()
            return client.opened, answers

    opened, answers = asyncio.run(main())
    assert opened == 3
    assert [cid for _ttft, _total, cid, *_ in answers] == ["x", "x", "x"]
