"""A bare GET through an ASGI app, for tests of the site's handlers and router."""

from __future__ import annotations

import asyncio
from typing import Any


def get_scope(path: str, root_path: str = "") -> dict[str, Any]:
    """The HTTP scope of a GET of ``path`` (under ``root_path``) from a test client."""
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": root_path,
        "headers": [(b"host", b"testserver")],
        "client": ("127.0.0.1", 50000),
        "server": ("testserver", 80),
    }


async def asgi_get(app: Any, scope: dict[str, Any] | str) -> int:
    """Send a GET (``scope``, or a path to build it from) through the ASGI ``app``;
    return the response's status."""
    if isinstance(scope, str):
        scope = get_scope(scope)
    sent: list[dict[str, Any]] = []
    requested = False

    async def receive() -> dict[str, Any]:
        nonlocal requested
        if requested:  # the client stays connected until the response is sent
            await asyncio.Event().wait()
        requested = True
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    return sent[0]["status"]
