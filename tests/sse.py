"""Drive the real ASGI application (as the web server does) and parse its Server-Sent Events."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.test import Client


@dataclass
class SseEvent:
    """One parsed SSE frame."""

    event: str
    data: dict[str, Any]
    id: str | None = None


@dataclass
class SseResult:
    """What one streamed request produced."""

    status: int = 0
    headers: dict[str, str] = field(default_factory=dict)
    events: list[SseEvent] = field(default_factory=list)
    comments: list[str] = field(default_factory=list)
    body: bytes = b""
    completed: bool = False  # the server ended the response (vs. we disconnected)

    @property
    def text(self) -> str:
        """Concatenated ``token`` text."""
        return "".join(e.data["t"] for e in self.events if e.event == "token")

    def last(self, name: str) -> SseEvent | None:
        """The last frame of event type ``name``."""
        found = [e for e in self.events if e.event == name]
        return found[-1] if found else None


def parse_frames(buffer: str) -> tuple[list[SseEvent], list[str], str]:
    """Split complete frames off ``buffer``; return events, comments, remainder."""
    events: list[SseEvent] = []
    comments: list[str] = []
    while "\n\n" in buffer:
        frame, buffer = buffer.split("\n\n", 1)
        fields: dict[str, str] = {}
        for line in frame.split("\n"):
            if line.startswith(":"):
                comments.append(line[1:].strip())
                continue
            name, _, value = line.partition(": ")
            fields[name] = value
        if "event" in fields:
            events.append(
                SseEvent(
                    fields["event"],
                    json.loads(fields.get("data", "{}")),
                    fields.get("id"),
                )
            )
    return events, comments, buffer


def session_cookie(client: Client) -> str:
    """The Cookie header of a logged-in test client."""
    return "; ".join(f"{k}={v.value}" for k, v in client.cookies.items())


async def asgi_sse(
    path: str,
    *,
    cookie: str = "",
    headers: dict[str, str] | None = None,
    stop_when: Callable[[SseResult], bool] | None = None,
    timeout: float = 60.0,
    method: str = "GET",
    body: bytes = b"",
) -> SseResult:
    """GET ``path`` (or ``method`` it with ``body``) through
    ``chatsite.asgi.application`` and collect SSE frames.

    If ``stop_when(result)`` becomes true, the client disconnects (``http.disconnect``)
    the way a closed browser tab does; otherwise reads until the server ends the response.
    """
    from chatsite.asgi import application

    path_only, _, query = path.partition("?")
    raw_headers = [(b"host", b"testserver")]
    if "accept" not in {name.lower() for name in headers or {}}:
        raw_headers.append((b"accept", b"text/event-stream"))
    if cookie:
        raw_headers.append((b"cookie", cookie.encode()))
    for name, value in (headers or {}).items():
        raw_headers.append((name.lower().encode(), value.encode()))
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path_only,
        "raw_path": path_only.encode(),
        "query_string": query.encode(),
        "root_path": "",
        "headers": raw_headers,
        "client": ("127.0.0.1", 50000),
        "server": ("testserver", 80),
    }
    result = SseResult()
    disconnect = asyncio.Event()
    sent_request = False
    buffer = ""

    async def receive() -> dict[str, Any]:
        nonlocal sent_request
        if not sent_request:
            sent_request = True
            return {"type": "http.request", "body": body, "more_body": False}
        await disconnect.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        nonlocal buffer
        if message["type"] == "http.response.start":
            result.status = message["status"]
            result.headers = {
                k.decode().lower(): v.decode() for k, v in message["headers"]
            }
        elif message["type"] == "http.response.body":
            chunk = message.get("body", b"")
            result.body += chunk
            if not message.get("more_body", False):
                result.completed = True
            if result.headers.get("content-type", "").startswith("text/event-stream"):
                buffer += chunk.decode("utf-8")
                events, comments, buffer = parse_frames(buffer)
                result.events.extend(events)
                result.comments.extend(comments)
                if stop_when and not disconnect.is_set() and stop_when(result):
                    disconnect.set()

    await asyncio.wait_for(application(scope, receive, send), timeout=timeout)
    return result


def ended(result: SseResult) -> bool:
    """True once a terminal frame arrived."""
    return any(e.event in ("done", "error") for e in result.events)
