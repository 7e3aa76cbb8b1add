"""``GET /healthz``: the load balancer's liveness check of a web process.

Answered by the ASGI router before Django (chatsite/asgi.py): no middleware, so no Host
check (HAProxy's check sends no public host name), no session and no database or Redis
call. It says only that this process's event loop serves requests: a process whose
event loop is blocked or dead is taken out of rotation (deploy/haproxy.cfg), while a
Redis or database outage is reported by the requests themselves, with a clear error,
rather than by emptying the whole pool.
"""

from __future__ import annotations

from typing import Any

HEALTH_PATH = "/healthz"


async def health_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Answer ``200 ok`` (text/plain, not cached) to any method on HEALTH_PATH."""
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [
                (b"content-type", b"text/plain; charset=utf-8"),
                (b"cache-control", b"no-store"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": b"ok\n"})
