"""The ``openai`` engine's tool calling (inference/engines/openai.py) against a fake
OpenAI-compatible server on loopback: the job's tool parameters reach the server as
sent, and the server's streamed ``delta.tool_calls`` come back as ToolCallDelta
pieces, with ``finish_reason: "tool_calls"``."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from inference import protocol
from inference.engines.base import Delta, Finish, ToolCallDelta
from inference.engines.openai import OpenAIEngine
from inference.protocol import Job

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]


def _chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


# what vLLM streams for one call (an id that is not call_…, arguments in pieces,
# one of them cutting a multibyte character's neighbour) after a little text
REMOTE = [
    _chunk({"role": "assistant", "content": "Checking."}),
    _chunk(
        {
            "tool_calls": [
                {
                    "index": 0,
                    "id": "chatcmpl-tool-7",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": ""},
                }
            ]
        }
    ),
    _chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"city": "Zü'}}]}),
    _chunk({"tool_calls": [{"index": 0, "function": {"arguments": 'rich"}'}}]}),
    _chunk({}, "tool_calls"),
    {
        "id": "chatcmpl-1",
        "choices": [],
        "usage": {"prompt_tokens": 11, "completion_tokens": 9, "total_tokens": 20},
    },
]


async def _serve(received: list[dict[str, Any]]) -> asyncio.Server:
    """A one-route HTTP/1.1 server: records each request body, answers REMOTE as SSE."""

    async def handle(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            int(line.split(b":")[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        received.append(json.loads(await reader.readexactly(length)))
        body = (
            "".join(f"data: {json.dumps(c)}\n\n" for c in REMOTE) + "data: [DONE]\n\n"
        )
        raw = body.encode()
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            + f"content-length: {len(raw)}\r\nconnection: close\r\n\r\n".encode()
            + raw
        )
        await writer.drain()
        writer.close()

    return await asyncio.start_server(handle, "127.0.0.1", 0)


async def _run(params: dict[str, Any]) -> tuple[list[Any], list[dict[str, Any]]]:
    received: list[dict[str, Any]] = []
    server = await _serve(received)
    port = server.sockets[0].getsockname()[1]
    engine = OpenAIEngine(base_url=f"http://127.0.0.1:{port}/v1", model="remote")
    await engine.start()
    try:
        job = Job(
            job_id="j1",
            messages=[{"role": "user", "content": "Weather in Zürich?"}],
            params=params,
        )
        items = [item async for item in engine.generate(job)]
    finally:
        await engine.close()
        server.close()
    return items, received


def test_tool_params_pass_through_and_remote_calls_are_relayed():
    params = {
        "tools": TOOLS,
        "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
        "parallel_tool_calls": False,
    }
    items, [body] = asyncio.run(_run(params))
    assert {k: body[k] for k in params} == params
    assert items[0] == Delta("Checking.")
    calls = [i for i in items if isinstance(i, ToolCallDelta)]
    assert calls == [
        ToolCallDelta(index=0, arguments="", id="chatcmpl-tool-7", name="get_weather"),
        ToolCallDelta(index=0, arguments='{"city": "Zü'),
        ToolCallDelta(index=0, arguments='rich"}'),
    ]
    finish = items[-1]
    assert isinstance(finish, Finish)
    assert finish.finish_reason == protocol.FINISH_TOOL_CALLS
    assert finish.usage.completion_tokens == 9


def test_a_job_without_tools_sends_none():
    _items, [body] = asyncio.run(_run({}))
    assert not {"tools", "tool_choice", "parallel_tool_calls"} & set(body)
