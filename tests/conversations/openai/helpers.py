"""Helpers of the API tests: one request through the real ASGI app, request bodies."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from inference import keys
from inference.connections import redis_sync


class Result:
    """What one ASGI request produced."""

    def __init__(self) -> None:
        self.status = 0
        self.headers: dict[str, str] = {}
        self.body = b""

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def data_lines(self) -> list[str]:
        """The ``data:`` payloads of an SSE body, in order."""
        return [
            line[len("data: ") :]
            for line in self.body.decode().split("\n")
            if line.startswith("data: ")
        ]

    @property
    def chunks(self) -> list[dict[str, Any]]:
        return [json.loads(d) for d in self.data_lines if d != "[DONE]"]


async def asgi(
    method: str,
    path: str,
    *,
    body: Any = None,
    key: str | None = None,
    disconnect_when: Any = None,
    disconnect_after: Any = None,
    timeout: float = 30.0,
    host: str = "testserver",
) -> Result:
    """Send one request through ``chatsite.asgi.application``; collect the response.

    ``disconnect_when(result)`` true: the client disconnects (``http.disconnect``);
    with ``disconnect_after`` (a coroutine function) it disconnects once that returns,
    whatever was sent.
    """
    from chatsite.asgi import application

    raw = json.dumps(body).encode() if body is not None else b""
    headers = [(b"host", host.encode()), (b"content-type", b"application/json")]
    if key is not None:
        headers.append((b"authorization", f"Bearer {key}".encode()))
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 50000),
        "server": ("testserver", 80),
    }
    result = Result()
    gone = asyncio.Event()
    sent = False

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": raw, "more_body": False}
        if disconnect_after is not None:
            await disconnect_after()
        else:
            await gone.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            result.status = message["status"]
            result.headers = {
                k.decode().lower(): v.decode() for k, v in message["headers"]
            }
        elif message["type"] == "http.response.body":
            result.body += message.get("body", b"")
            if disconnect_when and not gone.is_set() and disconnect_when(result):
                gone.set()

    await asyncio.wait_for(application(scope, receive, send), timeout=timeout)
    return result


def ask(**extra: Any) -> dict[str, Any]:
    """A valid completion request body for the default model; ``extra`` adds fields."""
    return {
        "model": "default",
        "messages": [{"role": "user", "content": "Say something."}],
        **extra,
    }


def no_reservations() -> bool:
    """Whether no token reservation is left unsettled in Redis."""
    return not list(keys.scan_iter_all(redis_sync(), keys.RESERVATION_KEY_PATTERN))


CAPITAL = "What is the capital of France?"


def capital(**extra: Any) -> dict[str, Any]:
    """A request asking :data:`CAPITAL`; ``extra`` adds fields."""
    return ask(messages=[{"role": "user", "content": CAPITAL}], **extra)
