"""A light HTTP/1.1 SSE client on asyncio streams, shared by the benchmarks.

The benchmarks share two cores with what they measure, so they read streams with
raw sockets (status line, headers, chunked decoding, frame boundaries) rather than
httpx, and never JSON-decode token payloads. On it, the chat page's turn
(:func:`turn_streamed`, :func:`turn_two_requests`) as a signed-in :class:`Session`.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field


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


class Session:
    """A signed-in browser: its cookies (the session's and ``csrftoken``)."""

    def __init__(self, cookies: dict[str, str]) -> None:
        self.cookies = cookies

    @property
    def header(self) -> str:
        """The Cookie header's value."""
        return "; ".join(f"{k}={v}" for k, v in self.cookies.items())


async def form_post(
    host: str, port: int, path: str, s: Session, form: str, accept: str
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Open a connection and send a form POST (``form`` url-encoded) as the chat page
    does (session cookie, CSRF header); the caller reads the response and closes
    ``writer``."""
    reader, writer = await asyncio.open_connection(host, port)
    body = form.encode()
    writer.write(
        f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nCookie: {s.header}\r\n"
        f"X-CSRFToken: {s.cookies['csrftoken']}\r\nAccept: {accept}\r\n"
        "Content-Type: application/x-www-form-urlencoded\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
        + body
    )
    return reader, writer


async def json_post(
    host: str, port: int, path: str, s: Session, form: str
) -> tuple[int, dict]:
    """POST ``form`` asking for JSON; return the status and the decoded body (``raw``:
    its first 300 characters when it is not JSON)."""
    reader, writer = await form_post(host, port, path, s, form, "application/json")
    try:
        status, headers = await read_head(reader)
        if "content-length" in headers:
            raw = await reader.readexactly(int(headers["content-length"]))
        else:
            raw = await reader.read()
        try:
            return status, json.loads(raw)
        except ValueError:
            return status, {"raw": raw[:300].decode(errors="replace")}
    finally:
        writer.close()


async def first_token_of(
    reader: asyncio.StreamReader,
    headers: dict[str, str],
    on_token: Callable[[], None] | None = None,
) -> tuple[float, int]:
    """Read an open SSE body to its end; return (wall time of the first ``token``
    frame, s; engine TTFT, ms, from the meta/token entry ids: a Redis stream entry id
    is the XADD's millisecond clock). ``on_token`` is called as the first token frame
    is read (e.g. to sample the web process's CPU there: the read goes on to the
    answer's end). Raises RuntimeError without a token."""
    first_at, meta_ms, token_ms = None, None, 0
    async for frame in sse_frames(reader, headers):
        entry = frame.id or "0-0"
        if frame.event == "meta" and meta_ms is None:
            meta_ms = int(entry.split("-")[0])
        elif frame.event == "token" and first_at is None:
            first_at, token_ms = frame.wall, int(entry.split("-")[0])
            if on_token is not None:
                on_token()
        elif frame.event in ("done", "error"):
            break
    if first_at is None:
        raise RuntimeError("the stream ended without a token")
    return first_at, token_ms - meta_ms if meta_ms is not None else 0


async def first_token(
    host: str,
    port: int,
    path: str,
    s: Session,
    on_token: Callable[[], None] | None = None,
) -> tuple[float, int]:
    """Open the SSE stream ``path`` (GET); as :func:`first_token_of`."""
    reader, writer, status, headers = await sse_open(host, port, path, s.header)
    try:
        if status != 200:
            raise RuntimeError(f"stream: status {status}")
        return await first_token_of(reader, headers, on_token)
    finally:
        writer.close()


async def turn_streamed(
    host: str,
    port: int,
    s: Session,
    form: str,
    on_token: Callable[[], None] | None = None,
) -> dict:
    """The chat page's turn: one POST whose 201 response is the answer's stream
    (``Accept: text/event-stream``; its first frame the turn's JSON), read to its end.
    Return the wall times (s) it was ``sent``, ``posted`` (the 201's head read) and
    ``first_at`` (the first token frame read) and the ``engine`` TTFT (ms);
    ``on_token``: as :func:`first_token_of`."""
    sent = time.time()
    reader, writer = await form_post(
        host, port, "/c/messages/", s, form, "text/event-stream, application/json"
    )
    try:
        status, headers = await read_head(reader)
        posted = time.time()
        if status != 201:
            raise RuntimeError(f"POST: {status} {(await reader.read())[:300]!r}")
        first_at, engine_ms = await first_token_of(reader, headers, on_token)
    finally:
        writer.close()
    return {"sent": sent, "posted": posted, "first_at": first_at, "engine": engine_ms}


async def turn_two_requests(
    host: str,
    port: int,
    s: Session,
    form: str,
    on_token: Callable[[], None] | None = None,
) -> dict:
    """A POST answered with the turn's JSON, then the GET of its stream URL; the same
    figures as :func:`turn_streamed`."""
    sent = time.time()
    status, body = await json_post(host, port, "/c/messages/", s, form)
    posted = time.time()
    if status != 201:
        raise RuntimeError(f"POST: {status} {body}")
    first_at, engine_ms = await first_token(
        host, port, body["assistant_message"]["stream_url"], s, on_token
    )
    return {"sent": sent, "posted": posted, "first_at": first_at, "engine": engine_ms}


@dataclass
class StreamStats:
    """What one client stream saw (wall-clock seconds, ms)."""

    opened: bool = False
    done: bool = False
    error: str = ""
    frames: int = 0
    first_token_lag_ms: float | None = None
    lags_ms: list[float] = field(default_factory=list)
    gaps_ms: list[float] = field(default_factory=list)
    done_lag_ms: float | None = None
    # time.monotonic() of each token frame's read (s): frames sent in a window
    token_monos: list[float] = field(default_factory=list)


def dechunk(buffer: bytearray) -> tuple[bytes, bool]:
    """Take the complete chunks of an HTTP/1.1 chunked body off the front of
    ``buffer`` (a partial chunk stays there for the next read); return their data
    joined and whether the last (size 0) chunk came. Raises ValueError on a malformed
    chunk size."""
    out: list[bytes] = []
    pos = 0
    while (eol := buffer.find(b"\r\n", pos)) >= 0:
        size = int(bytes(buffer[pos:eol]).split(b";")[0], 16)
        if size == 0:
            del buffer[:]
            return b"".join(out), True
        end = eol + 2 + size
        if len(buffer) < end + 2:
            break
        out.append(bytes(buffer[eol + 2 : end]))
        pos = end + 2
    del buffer[:pos]
    return b"".join(out), False


def frame_head(frame: bytes) -> tuple[bytes | None, bytes | None, bytes]:
    """Return one SSE frame's (event, id, data) as raw bytes; event None for a
    comment or a ``retry:`` line. Reads only the frame's lines, decodes nothing."""
    event = event_id = None
    data = b""
    for line in frame.split(b"\n"):
        if line.startswith(b"event: "):
            event = line[7:]
        elif line.startswith(b"id: "):
            event_id = line[4:]
        elif line.startswith(b"data: "):
            data = line[6:]
    return event, event_id, data


async def stream_follow(
    host: str,
    port: int,
    path: str,
    cookie: str,
    stats: StreamStats,
    opened: asyncio.Event | None = None,
) -> None:
    """Read one SSE stream to its ``done``/``error`` frame, filling ``stats``: lags
    from each token's Redis entry time (its id: the XADD's millisecond clock) to the
    frame's read, gaps between token frames, the last token to ``done``. ``opened``
    is set at the stream's first comment (the stream is open).

    The load side of the fan-out benchmarks: it reads whatever the socket holds in
    one call and takes the chunks and frames off a buffer (:func:`dechunk`,
    :func:`frame_head`), so a frame costs no await and no object of its own."""
    try:
        reader, writer, status, headers = await sse_open(host, port, path, cookie)
    except (OSError, ValueError, IndexError) as exc:
        stats.error = f"connect: {exc}"
        return
    try:
        if status != 200:
            stats.error = f"status {status}"
            return
        chunked = headers.get("transfer-encoding", "").lower() == "chunked"
        raw, body = bytearray(), b""
        last_frame_at = None
        ended = False
        while not ended:
            piece = await reader.read(65536)
            if not piece:
                break
            mono = time.monotonic()
            wall_ms = time.time() * 1000
            if chunked:
                raw += piece
                data, ended = dechunk(raw)
                body += data
            else:
                body += piece
            *frames, body = body.split(b"\n\n")
            for frame in frames:
                event, event_id, data = frame_head(frame)
                if event is None:  # retry: / ping comments
                    if not stats.opened:
                        stats.opened = True
                        if opened is not None:
                            opened.set()
                    continue
                stats.frames += 1
                if event == b"token" and event_id:
                    if last_frame_at is not None:
                        stats.gaps_ms.append((mono - last_frame_at) * 1000)
                    last_frame_at = mono
                    stats.token_monos.append(mono)
                    lag = wall_ms - int(event_id.split(b"-")[0])
                    stats.lags_ms.append(lag)
                    if stats.first_token_lag_ms is None:
                        stats.first_token_lag_ms = lag
                elif event in (b"done", b"error"):
                    stats.done = event == b"done"
                    if last_frame_at is not None:
                        stats.done_lag_ms = (mono - last_frame_at) * 1000
                    # an error frame says why (its code), e.g. queue_timeout
                    code = json.loads(data).get("code", "") if data else ""
                    stats.error = "" if stats.done else f"error frame {code}".strip()
                    return
        stats.error = stats.error or "stream ended without done"
    except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
        stats.error = f"{type(exc).__name__}: {exc}"
    finally:
        writer.close()
