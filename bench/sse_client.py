"""A light streaming client for the API benches: the request the official ``openai``
client sends for a streamed chat completion, over raw asyncio streams (HTTP/1.1,
kept-alive connections), reading the SSE answer until ``[DONE]``.

The ``openai`` client parses every chunk into pydantic objects; at 50 concurrent
streams of 34 chunks that alone can fill the load core the benchmark's other parts
share, so the benchmark would measure its client. This one parses JSON only until the
first content delta (its TTFT, and the completion id) and after that only looks for
the end of the body. :meth:`RawClient.stream` returns the same
:data:`bench.overhead_levels.Sample` as :func:`bench.overhead_levels.one`.
"""

from __future__ import annotations

import asyncio
import json
import time
from urllib.parse import urlsplit

# The body the official client sends for bench/overhead_levels.py's request.
PROMPT = [{"role": "user", "content": "Say the fixed answer."}]


class StreamError(Exception):
    """The server answered an error status, or broke the stream off before [DONE]."""


class RawClient:
    """Streamed chat completions against ``base_url`` (``http://host:port[/prefix]``,
    the OpenAI base URL with its ``/v1``) with bearer ``key``; at most
    ``max_connections`` open (asyncio streams), reused between requests;
    ``opened`` counts the connections made."""

    def __init__(self, base_url: str, key: str, max_connections: int) -> None:
        url = urlsplit(base_url)
        self.host, self.port = url.hostname or "127.0.0.1", url.port or 80
        self.path = url.path.rstrip("/") + "/chat/completions"
        self.key = key
        self._idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
        self._slots = asyncio.Semaphore(max_connections)
        self.opened = 0

    def request(self, model: str) -> bytes:
        """The HTTP request's bytes for one streamed completion of ``model``."""
        body = json.dumps(
            {"messages": PROMPT, "model": model, "max_tokens": 256, "stream": True}
        ).encode()
        head = (
            f"POST {self.path} HTTP/1.1\r\nhost: {self.host}:{self.port}\r\n"
            f"authorization: Bearer {self.key}\r\naccept: application/json\r\n"
            "content-type: application/json\r\nuser-agent: bench-sse-client\r\n"
            f"content-length: {len(body)}\r\n\r\n"
        )
        return head.encode() + body

    async def stream(self, model: str) -> tuple[float, float, str, float, float, float]:
        """Stream one completion; return (TTFT ms, total ms, completion id, epoch s
        the request was made, epoch s its first content delta came, epoch s its bytes
        went out). Raises :class:`StreamError` on an error status or a body without
        ``[DONE]``, OSError on a connection failure."""
        sent = time.time()
        start = time.perf_counter()
        data = self.request(model)
        async with self._slots:
            ttft, cid, first_at, wire = await self._exchange(data, start)
        total = (time.perf_counter() - start) * 1000
        return (ttft if ttft is not None else total), total, cid, sent, first_at, wire

    async def _exchange(
        self, data: bytes, start: float
    ) -> tuple[float | None, str, float, float]:
        """Send ``data`` on an idle connection (or a new one) and read the answer:
        (TTFT ms or None, completion id, epoch s of the first content delta, epoch s
        the request went out). A kept-alive connection the server closed meanwhile
        (its keep-alive timeout) is dropped and the request sent on a new one, as
        httpx does."""
        while True:
            conn = self._idle.pop() if self._idle else None
            if conn is not None and conn[0].at_eof():
                conn[1].close()
                continue
            reused = conn is not None
            if conn is None:
                conn = await asyncio.open_connection(self.host, self.port)
                self.opened += 1
            reader, writer = conn
            wire = time.time()
            writer.write(data)
            keep = False
            try:
                ttft, cid, first_at, keep = await self._read(reader, start)
            except (asyncio.IncompleteReadError, ConnectionError):
                if not reused:
                    raise
                continue  # closed by the server as we sent: try a new connection
            finally:
                if keep:
                    self._idle.append(conn)
                else:
                    writer.close()
            return ttft, cid, first_at, wire

    async def _read(
        self, reader: asyncio.StreamReader, start: float
    ) -> tuple[float | None, str, float, bool]:
        """Read one response: (TTFT ms or None, completion id, epoch s of the first
        content delta or 0, whether the connection may be reused)."""
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip().lower()
        chunked = headers.get("transfer-encoding") == "chunked"
        length = int(headers.get("content-length", "-1"))
        keep = headers.get("connection") != "close" and (chunked or length >= 0)
        if status != 200:
            body = await self._body(reader, chunked, length)
            raise StreamError(f"HTTP {status}: {body[:200]!r}")
        ttft, cid, first_at = None, "", 0.0
        pending = tail = b""
        async for piece in self._pieces(reader, chunked, length):
            tail = (tail + piece)[-32:]  # enough to hold the [DONE] event
            if ttft is not None:
                continue
            pending += piece
            *events, pending = pending.split(b"\n\n")
            for event in events:
                if not event.startswith(b"data: ") or event == b"data: [DONE]":
                    continue
                chunk = json.loads(event[6:])
                cid = cid or chunk.get("id", "")
                choices = chunk.get("choices") or [{}]
                if (choices[0].get("delta") or {}).get("content"):
                    ttft = (time.perf_counter() - start) * 1000
                    first_at = time.time()
                    break
        if b"data: [DONE]" not in tail:
            raise StreamError("stream ended without [DONE]")
        return ttft, cid, first_at, keep

    async def _pieces(self, reader: asyncio.StreamReader, chunked: bool, length: int):
        """The body's bytes as they come (HTTP chunked, Content-Length, or to EOF)."""
        if chunked:
            while True:
                size = int((await reader.readuntil(b"\r\n"))[:-2].split(b";")[0], 16)
                if size == 0:
                    await reader.readuntil(b"\r\n")  # no trailers
                    return
                yield (await reader.readexactly(size + 2))[:-2]
        elif length >= 0:
            yield await reader.readexactly(length)
        else:
            while piece := await reader.read(65536):
                yield piece

    async def _body(self, reader: asyncio.StreamReader, chunked: bool, length: int):
        return b"".join([p async for p in self._pieces(reader, chunked, length)])

    async def close(self) -> None:
        """Close the idle connections."""
        for _reader, writer in self._idle:
            writer.close()
        self._idle = []
