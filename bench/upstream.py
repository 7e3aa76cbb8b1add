"""A stand-in OpenAI-compatible upstream for the API benches: a raw asyncio HTTP/1.1
server (uvloop when installed) that writes pre-encoded chunks, so the load core spends
as little as it can on the upstream's side of a benchmark.

    python bench/upstream.py --port PORT [--host 127.0.0.1]

``POST /v1/chat/completions`` streams a fixed answer whatever the request asks: a
role chunk at once, ``BENCH_TOKENS`` content chunks (`` tok0``, `` tok1``...)
``BENCH_TOKEN_MS`` milliseconds apart, a ``stop`` chunk and a usage chunk (10 prompt
tokens), then ``[DONE]``; ``GET /v1/models`` lists the one model, ``bench-fixed``.
Every chunk's bytes (its SSE event in an HTTP chunk) are built once per model name and
process (``created`` is the process's start time), then only written. Connections are
kept alive (HTTP/1.1, chunked responses); a request body needs a Content-Length (what
httpx and aiohttp send); anything else is answered 404 / 411.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import time

TOKENS = int(os.environ.get("BENCH_TOKENS", "32"))
DELAY_S = float(os.environ.get("BENCH_TOKEN_MS", "5")) / 1000.0
MODEL = "bench-fixed"
# Request head plus body beyond this many bytes: refused (the bench sends < 1 kB).
MAX_REQUEST = 1 << 20
_CREATED = int(time.time())


def _http_chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _event(model: str, delta: dict | None, finish: str | None = None, usage=None):
    payload = {
        "id": "chatcmpl-up",
        "object": "chat.completion.chunk",
        "created": _CREATED,
        "model": model,
        "choices": []
        if usage
        else [{"index": 0, "delta": delta, "finish_reason": finish}],
        **({"usage": usage} if usage else {}),
    }
    return _http_chunk(b"data: " + json.dumps(payload).encode() + b"\n\n")


@functools.lru_cache(maxsize=16)
def answer(model: str) -> tuple[bytes, list[bytes], bytes]:
    """The answer's bytes for ``model``: the response head with the role chunk, the
    ``TOKENS`` content chunks, and the tail (stop, usage, ``[DONE]``, the last
    HTTP chunk)."""
    head = (
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
        b"cache-control: no-cache\r\ntransfer-encoding: chunked\r\n\r\n"
    ) + _event(model, {"role": "assistant", "content": ""})
    tokens = [_event(model, {"content": f" tok{i}"}) for i in range(TOKENS)]
    usage = {"prompt_tokens": 10, "completion_tokens": TOKENS}
    usage["total_tokens"] = 10 + TOKENS
    tail = (
        _event(model, {}, "stop")
        + _event(model, None, usage=usage)
        + _http_chunk(b"data: [DONE]\n\n")
        + b"0\r\n\r\n"
    )
    return head, tokens, tail


def _plain(status: str, body: bytes, content_type: str = "text/plain") -> bytes:
    return (
        f"HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\n"
        f"content-length: {len(body)}\r\n\r\n"
    ).encode() + body


MODELS = _plain(
    "200 OK",
    json.dumps(
        {
            "object": "list",
            "data": [
                {"id": MODEL, "object": "model", "created": 0, "owned_by": "bench"}
            ],
        }
    ).encode(),
    "application/json",
)


class Upstream(asyncio.Protocol):
    """One connection: parse requests, answer them one after another."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buffer = b""
        self.task: asyncio.Task[None] | None = None

    def connection_made(self, transport) -> None:  # type: ignore[override]
        self.transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        if self.task is not None:
            self.task.cancel()

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if len(self.buffer) > MAX_REQUEST:
            self._close(_plain("413 Content Too Large", b"too large\n"))
        elif self.task is None or self.task.done():
            self._next()

    def _close(self, response: bytes) -> None:
        assert self.transport is not None
        self.transport.write(response)
        self.transport.close()

    def _next(self) -> None:
        """Start answering the buffered request once it is whole."""
        end = self.buffer.find(b"\r\n\r\n")
        if end < 0:
            return
        lines = self.buffer[:end].decode("latin-1").split("\r\n")
        method, path, _version = lines[0].split(" ", 2)
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        if "transfer-encoding" in headers:
            self._close(_plain("411 Length Required", b"content-length only\n"))
            return
        size = int(headers.get("content-length", "0"))
        if len(self.buffer) < end + 4 + size:
            return
        body = self.buffer[end + 4 : end + 4 + size]
        self.buffer = self.buffer[end + 4 + size :]
        keep = headers.get("connection", "").lower() != "close"
        assert self.transport is not None
        if method == "GET" and path.startswith("/v1/models"):
            self.transport.write(MODELS)
        elif method == "POST" and path.startswith("/v1/chat/completions"):
            model = json.loads(body).get("model") or MODEL
            self.task = asyncio.ensure_future(self._stream(model, keep))
            return
        else:
            self.transport.write(_plain("404 Not Found", b"not found\n"))
        if not keep:
            self.transport.close()
        elif self.buffer:
            self._next()

    async def _stream(self, model: str, keep: bool) -> None:
        head, tokens, tail = answer(model)
        transport = self.transport
        assert transport is not None
        transport.write(head)
        for chunk in tokens:
            if DELAY_S:
                await asyncio.sleep(DELAY_S)
            transport.write(chunk)
        transport.write(tail)
        if not keep:
            transport.close()
        elif self.buffer:
            asyncio.get_running_loop().call_soon(self._next)


async def serve(host: str, port: int) -> None:
    """Serve until cancelled."""
    loop = asyncio.get_running_loop()
    server = await loop.create_server(Upstream, host, port, backlog=2048)
    async with server:
        await server.serve_forever()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    args = p.parse_args()
    try:
        import uvloop
    except ImportError:
        asyncio.run(serve(args.host, args.port))
    else:
        uvloop.run(serve(args.host, args.port))


if __name__ == "__main__":
    main()
