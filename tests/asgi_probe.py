"""Test-only ASGI entry point: the site's application, plus one path that tells what
this (web) process has loaded.

    uvicorn tests.asgi_probe:application  (tests.stack.web_process(app=...))

``GET /__probe__/process`` answers JSON ``{"pid": int, "modules": [names of
sys.modules, sorted]}``; every other request goes to :data:`chatsite.asgi.application`
unchanged. Never deployed: it lives under tests/ and only tests and benchmarks start it.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from chatsite.asgi import application as site_application

PROBE_PATH = "/__probe__/process"


async def application(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Answer :data:`PROBE_PATH` with this process's pid and module names; pass the
    rest to the site."""
    if scope["type"] == "http" and scope["path"] == PROBE_PATH:
        body = json.dumps({"pid": os.getpid(), "modules": sorted(sys.modules)})
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": body.encode()})
        return
    await site_application(scope, receive, send)
