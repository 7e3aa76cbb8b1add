"""The site handler's own CPU per request: the sync chain's thread (started per
request, or kept), its hop and its end, without the chain's work.

    .venv/bin/python bench/request_threads.py [--requests 400] [--blocks 7]

In this process, pinned to core 0 (``os.sched_setaffinity``), on one event loop
(uvloop when installed, as the web process runs): ``--requests`` GETs per block
through ``chatsite.asgi.sync_site_app``, first with the chain replaced by a view that
returns a 200 at once (the handler's own cost: the hop to the request's sync thread,
the thread's start or reuse, the response's close and the request's end), then the
real chain on ``/login/`` (sessions, CSRF, a template). Prints the process CPU
(``time.process_time``: every thread of this process) per request, ms: the median
over ``--blocks`` blocks, and the blocks' spread. No database or Redis is needed for
the first figure; the second reads the session cache (Redis).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.boot import ROOT, django_start  # noqa: E402,F401


def _block(app: object, path: str, n: int) -> tuple[float, int]:
    from tests.asgi_get import asgi_get

    async def run() -> None:
        for _ in range(n):
            status = await asgi_get(app, path)
            assert status == 200, status

    try:
        import uvloop

        loop = uvloop.new_event_loop()
    except ImportError:
        loop = asyncio.new_event_loop()
    threads0 = threading.active_count()
    started = time.process_time()
    try:
        loop.run_until_complete(run())
    finally:
        loop.close()
    return (
        time.process_time() - started
    ) * 1000 / n, threading.active_count() - threads0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--blocks", type=int, default=7)
    args = parser.parse_args()
    os.sched_setaffinity(0, {0})
    django_start({"LOG_LEVEL": "WARNING"})
    from django.conf import settings
    from django.http import HttpResponse

    from chatsite import asgi

    settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "testserver"]
    app = asgi.sync_site_app
    real = app.get_response
    for label, path, chain in [
        ("bare chain (a 200 at once)", "/x/", lambda request: HttpResponse("ok")),
        ("real chain, GET /login/", "/login/", real),
    ]:
        app.get_response = chain
        _block(app, path, 50)  # warm
        per, grown = zip(
            *[_block(app, path, args.requests) for _ in range(args.blocks)],
            strict=True,
        )
        print(
            f"{label}: {statistics.median(per):.3f} ms CPU per request "
            f"(blocks {min(per):.3f}-{max(per):.3f}, {args.blocks} x {args.requests}); "
            f"threads grown per block {max(grown)}; load {os.getloadavg()[0]:.2f}"
        )
    app.get_response = real


if __name__ == "__main__":
    main()
