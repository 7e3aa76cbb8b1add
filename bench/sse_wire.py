"""A light HTTP/1.1 SSE client on asyncio streams, shared by the benchmarks.

The benchmarks share two cores with what they measure, so they read streams with
raw sockets (status line, headers, chunked decoding, frame boundaries) rather than
httpx, and never JSON-decode token payloads.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass


@dataclass
class Frame:
    """One SSE frame: ``event`` None for comments and ``retry:`` lines; ``data`` raw
    bytes; ``wall`` (time.time(), s) and ``mono`` (time.monotonic(), s) of the read
    that brought it."""

    event: str | None
    id: str | None
    data: bytes
    wall: float
    mono: float


async def read_head(reader: asyncio.StreamReader) -> tuple[int, dict[str, str]]:
    """Read a response's status line and headers (names lower-cased)."""
    status = int((await reader.readline()).split()[1])
    headers: dict[str, str] = {}
    while line := (await reader.readline()).decode("latin-1").strip():
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return status, headers


async def _body(reader: asyncio.StreamReader, chunked: bool) -> AsyncIterator[bytes]:
    """Yield the response body's pieces (dechunked)."""
    if not chunked:
        while piece := await reader.read(65536):
            yield piece
        return
    while True:
        size = int((await reader.readline()).split(b";")[0], 16)
        if size == 0:
            return
        yield await reader.readexactly(size)
        await reader.readexactly(2)


async def sse_open(
    host: str, port: int, path: str, cookie: str
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, int, dict[str, str]]:
    """GET ``path`` as an EventSource would; return the streams, status and headers.
    Raises OSError when the connection fails; the caller closes ``writer``."""
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(
        f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nCookie: {cookie}\r\n"
        "Accept: text/event-stream\r\n\r\n".encode()
    )
    status, headers = await read_head(reader)
    return reader, writer, status, headers


async def sse_frames(
    reader: asyncio.StreamReader, headers: dict[str, str]
) -> AsyncIterator[Frame]:
    """Yield the frames of an open stream until the server ends the body."""
    chunked = headers.get("transfer-encoding", "").lower() == "chunked"
    buffer = b""
    async for piece in _body(reader, chunked):
        wall, mono = time.time(), time.monotonic()
        buffer += piece
        while b"\n\n" in buffer:
            frame, buffer = buffer.split(b"\n\n", 1)
            event = event_id = None
            data = b""
            for line in frame.split(b"\n"):
                if line.startswith(b"event: "):
                    event = line[7:].decode()
                elif line.startswith(b"id: "):
                    event_id = line[4:].decode()
                elif line.startswith(b"data: "):
                    data = line[6:]
            yield Frame(event, event_id, data, wall, mono)
