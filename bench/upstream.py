"""A stand-in OpenAI-compatible upstream for bench/gateway_overhead.py (Starlette).

    uvicorn bench.upstream:app --port PORT   (run from the repository root)

``POST /v1/chat/completions`` streams a fixed answer: a role chunk, ``BENCH_TOKENS``
content chunks (`` tok0``, `` tok1``...) ``BENCH_TOKEN_MS`` milliseconds apart, a
``stop`` chunk and a usage chunk (10 prompt tokens), then ``[DONE]``, whatever the
request asks; ``GET /v1/models`` lists the one model, ``bench-fixed``.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import AsyncIterator
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

TOKENS = int(os.environ.get("BENCH_TOKENS", "32"))
DELAY_S = float(os.environ.get("BENCH_TOKEN_MS", "5")) / 1000.0


async def completions(request: Request) -> StreamingResponse:
    """Stream the fixed answer as ``chat.completion.chunk`` events."""
    body = await request.json()
    cid, created = "chatcmpl-up", int(time.time())

    def chunk(delta: dict, finish: str | None = None, usage: Any = None) -> str:
        payload = {
            "id": cid,
            "object": "chat.completion.chunk",
            "created": created,
            "model": body.get("model", ""),
            "choices": []
            if usage
            else [{"index": 0, "delta": delta, "finish_reason": finish}],
            **({"usage": usage} if usage else {}),
        }
        return "data: " + json.dumps(payload) + "\n\n"

    async def gen() -> AsyncIterator[str]:
        yield chunk({"role": "assistant", "content": ""})
        for i in range(TOKENS):
            if DELAY_S:
                await asyncio.sleep(DELAY_S)
            yield chunk({"content": f" tok{i}"})
        yield chunk({}, "stop")
        usage = {
            "prompt_tokens": 10,
            "completion_tokens": TOKENS,
            "total_tokens": 10 + TOKENS,
        }
        yield chunk({}, usage=usage)
        yield "data: [DONE]\n\n"

    return StreamingResponse(gen(), media_type="text/event-stream")


async def models(request: Request) -> JSONResponse:
    """List the one model."""
    model = {"id": "bench-fixed", "object": "model", "created": 0, "owned_by": "bench"}
    return JSONResponse({"object": "list", "data": [model]})


app = Starlette(
    routes=[
        Route("/v1/chat/completions", completions, methods=["POST"]),
        Route("/v1/models", models),
    ]
)
