"""The ``openai`` engine reads a server-sent event stream however its bytes arrive
(inference/engines/openai.py): lines split across reads, a multi-byte character
split between them, and LF, CRLF or CR line ends."""

from __future__ import annotations

import asyncio
import json

import pytest

from inference.engines.base import Delta, Finish
from inference.engines.openai import OpenAIEngine
from inference.protocol import Job
from tests.inference.helpers import request_read

TEXTS = ["héllo", " wörld ✓", " ok"]


def _body(newline: str) -> bytes:
    events = [{"choices": [{"index": 0, "delta": {"content": t}}]} for t in TEXTS]
    events.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]})
    events.append(
        {"choices": [], "usage": {"prompt_tokens": 4, "completion_tokens": 3}}
    )
    lines = [f": comment{newline}"]
    for event in events:
        lines.append(
            f"event: message{newline}data: {json.dumps(event, ensure_ascii=False)}"
        )
        lines.append(newline * 2)
    lines.append(f"data: [DONE]{newline}{newline}")
    return "".join(lines).encode()


async def _answer(newline: str) -> list[object]:
    body = _body(newline)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        await request_read(reader)
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"transfer-encoding: chunked\r\n\r\n"
        )
        for i in range(0, len(body), 3):  # 3-byte pieces, each read on its own
            piece = body[i : i + 3]
            writer.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
            await writer.drain()
            await asyncio.sleep(0.002)
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    engine = OpenAIEngine(base_url=f"http://127.0.0.1:{port}", model="remote")
    await engine.start()
    try:
        job = Job(job_id="sse", messages=[{"role": "user", "content": "hi"}])
        return [item async for item in engine.generate(job)]
    finally:
        await engine.close()
        server.close()


@pytest.mark.parametrize("newline", ["\n", "\r\n", "\r"])
def test_an_event_stream_split_anywhere_gives_the_same_deltas(newline):
    items = asyncio.run(_answer(newline))
    assert items[:-1] == [Delta(t) for t in TEXTS]
    finish = items[-1]
    assert isinstance(finish, Finish) and finish.finish_reason == "length"
    assert (finish.usage.prompt_tokens, finish.usage.completion_tokens) == (4, 3)
