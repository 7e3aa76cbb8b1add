"""daphne on uvloop's event loop, for ``bench/sse_fanout.py --server daphne-uvloop``:
``python -m bench.daphne_uvloop [daphne's arguments]``.

daphne runs Twisted's asyncio reactor on the loop that ``asyncio.new_event_loop()``
returns when ``daphne.server`` is first imported; with uvloop's event loop policy set
before that import, the reactor, Django's handler and every stream's task run on
uvloop's loop (libuv, written in C) instead of asyncio's selector loop, whose
scheduling and timers are Python code paid per frame (bench/results/2026-12-04-frame.md).
A measured alternative, not how the site is deployed. Everything else is daphne as
deployed: the same arguments, endpoints, ``--proxy-headers`` and protocol code (which reaches Twisted's
HTTP module directly: :func:`daphne_http_unproxied`). Scrapy runs Twisted's
asyncio reactor on uvloop the same way (its ASYNCIO_EVENT_LOOP setting).

Raises SystemExit with daphne's status; ImportError when uvloop is not installed
(requirements.txt pins it).
"""

from __future__ import annotations

import asyncio
import sys


def main() -> None:
    """Run daphne's command line (``sys.argv``) after :func:`daphne_prepare`."""
    daphne_prepare()
    from daphne.cli import CommandLineInterface  # type: ignore[import-untyped]

    CommandLineInterface.entrypoint()


def daphne_prepare() -> None:
    """Set uvloop's event loop policy, then import daphne's server (which makes its
    loop and installs Twisted's asyncio reactor on it). Raises RuntimeError when
    ``daphne.server`` was imported already (its loop is made: too late)."""
    import uvloop

    if "daphne.server" in sys.modules:
        raise RuntimeError("daphne.server was imported before the event loop policy")
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    import daphne.server  # type: ignore[import-untyped]  # noqa: F401

    daphne_http_unproxied()


def daphne_http_unproxied() -> bool:
    """Point daphne's protocol module at ``twisted.web.http`` itself; return whether
    it changed anything.

    Twisted registers that module behind a deprecation proxy
    (``twisted.python.deprecate._ModuleProxy``, for a few deprecated names), so
    each ``http.Request.write(...)`` daphne makes per response body message runs
    the proxy's Python ``__getattribute__``: about 4 % of the web's CPU per SSE
    frame. daphne uses none of the deprecated names."""
    import daphne.http_protocol as protocol  # type: ignore[import-untyped]
    from twisted.python.deprecate import _ModuleProxy

    if not isinstance(protocol.http, _ModuleProxy):
        return False
    protocol.http = object.__getattribute__(protocol.http, "_module")
    return True


if __name__ == "__main__":
    main()
