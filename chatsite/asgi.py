"""ASGI entry point: Channels' ProtocolTypeRouter in front of Django's ASGI handler.

Run with `uvicorn --loop uvloop --http httptools --lifespan off
chatsite.asgi:application` (the Procfile's web line has every option; daphne serves
it too). HTTP (pages, SSE streams, the API) goes to Django; the router is where
WebSocket consumers would be added. With SERVE_STATIC on
(`make run`, whether DEBUG is on or off), static files are served by Django's
ASGIStaticFilesHandler; in production a reverse proxy serves STATIC_ROOT.

The OpenAI-compatible API (every path of ``conversations.openai.urls``, as the root
URLconf includes it: :data:`api_resolver`) has its own Django handler, built with
``settings.API_MIDDLEWARE``: it has no session, CSRF, login or messages (Bearer keys,
JSON only), and each of those middleware costs the request a hop to a sync thread and
back (the difference: docs/benchmarks.md). Nor does it start a sync thread per request
(:class:`ApiASGIHandler`).
"""

import asyncio
import functools
import gc
import os
import weakref
from typing import Any

from asgiref.sync import ThreadSensitiveContext, iscoroutinefunction, sync_to_async
from channels.routing import ProtocolTypeRouter
from django.conf import settings
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler
from django.core import signals
from django.core.asgi import get_asgi_application
from django.core.exceptions import RequestAborted
from django.core.handlers.asgi import ASGIHandler, get_script_prefix
from django.http import HttpRequest
from django.http.response import HttpResponseBase
from django.test.utils import override_settings
from django.urls import (
    ResolverMatch,
    set_script_prefix,
)

import chatsite.blas_threads  # noqa: F401  first: before anything loads numpy
from chatsite.bodycap import body_capped, response_send
from chatsite.db import (
    request_connection_release,
    request_start_defer,
    request_start_send,
    request_thread_share,
)
from chatsite.errors import error_response
from chatsite.health import HEALTH_PATH, health_app
from chatsite.request_threads import request_thread_lease, request_thread_return
from chatsite.site_match import match_reused, site_match
from chatsite.warmup import services_warm_start, web_warm

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chatsite.settings.dev")

django_asgi_app = get_asgi_application()

# Imported once the apps are set up (get_asgi_application ran django.setup()).
from chatsite.api_paths import api_resolver, is_api_path  # noqa: E402
from gateway import ratelimits  # noqa: E402


class StartedHookASGIHandler(ASGIHandler):
    """Django's ASGI handler with Django's ``request_started`` signal sent where a
    subclass's :meth:`request_started` says, and the request ended (Django's
    ``request_finished``) by its :meth:`request_ended`: Django's ``asend`` runs the
    signal's sync receivers in a hop to a sync thread of its own, there and back,
    before every request. The rest of :meth:`handle` is Django's, step for step."""

    async def request_started(self, scope: Any, request: Any) -> None:
        """Send ``request_started`` for ``scope`` as Django does; ``request`` is the
        built request, or None for one Django could not build."""
        await signals.request_started.asend(sender=self.__class__, scope=scope)

    async def request_ended(self, response: HttpResponseBase | None) -> None:
        """End the request as Django does: ``response.close()`` (which sends
        ``request_finished``) in a sync thread, or, with no response (the client
        left first), ``request_finished`` alone."""
        if response is None:
            await signals.request_finished.asend(sender=self.__class__)
        else:
            await sync_to_async(response.close)()

    async def handle(self, scope: Any, receive: Any, send: Any) -> None:
        """Django's :meth:`ASGIHandler.handle` (Django 5.2; tests/test_asgi.py
        checks that its source is still the one this follows) with the signals
        sent by :meth:`request_started` once the request is built and by
        :meth:`request_ended`: a request Django cannot build is answered after
        the first, as Django's; a client gone mid-response ends the request."""
        try:
            body_file = await self.read_body(receive)
        except RequestAborted:
            return
        set_script_prefix(get_script_prefix(scope))
        request, error_response = self.create_request(scope, body_file)
        await self.request_started(scope, request)
        if request is None:
            assert error_response is not None  # create_request gives one or the other
            body_file.close()
            await self.send_response(error_response, send)
            await self.request_ended(error_response)
            return

        async def process_request(request: Any, send: Any) -> HttpResponseBase:
            response = await self.run_get_response(request)
            try:
                await self.send_response(response, send)
            except asyncio.CancelledError:
                pass  # the client left during send_response
            return response

        # as Django: listen for the client's disconnect while the response is made
        listening = asyncio.create_task(self.listen_for_disconnect(receive))
        processing = asyncio.create_task(process_request(request, send))
        tasks = [listening, processing]  # checked, and cancelled, in this order
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in tasks:
            if task.done():
                try:
                    task.result()
                except RequestAborted:
                    pass
                except AssertionError:
                    body_file.close()
                    raise
            else:
                task.cancel()
                try:
                    await task
                except asyncio.CancelledError:
                    pass
        try:
            response = processing.result()
        except asyncio.CancelledError:
            await self.request_ended(None)
        else:
            await self.request_ended(response)
        body_file.close()


class ApiASGIHandler(StartedHookASGIHandler):
    """Django's ASGI handler for the API: a request's thread-sensitive calls
    (Django's request signals, ``response.close()``, ``db_brief`` steps) run on the
    process's shared sync threads (:func:`chatsite.db.request_thread_share`), not
    on a thread started for the request. Its admission runs on
    :func:`chatsite.db.db_quick`'s threads; no step keeps a connection for the next.
    Django's ``request_started`` goes out in the request's first sync step, on the
    thread that step's queries use (:meth:`request_started`), not in a hop of its
    own before the view.
    """

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        """Serve one HTTP request (raises ValueError for another scope type)."""
        if scope["type"] != "http":
            raise ValueError(f"Django serves HTTP only, not {scope['type']}.")
        async with ThreadSensitiveContext():
            request_thread_share()
            await self.handle(scope, receive, send)

    async def request_started(self, scope: Any, request: Any) -> None:
        """Have the request's first sync step (:func:`chatsite.db.db_quick`,
        :func:`chatsite.db.db_brief`) send ``request_started`` as it starts, on its
        own thread (:func:`chatsite.db.request_start_defer`); a request Django could
        not build sends it at once, as Django does.

        Its receivers (``reset_queries``, ``close_old_connections``) act on the
        calling thread's connections, so they belong on the thread that will
        query, never on the event loop's (which may hold a connection of its own
        in tests, and must not query). A request that ends before any step (a
        405) sends it as it ends (:meth:`request_ended`), so every request sends
        it once, before ``request_finished``.
        """
        if request is None:
            await super().request_started(scope, request)
            return
        request_start_defer(
            functools.partial(
                signals.request_started.send, sender=self.__class__, scope=scope
            )
        )

    def resolve_request(self, request: HttpRequest) -> ResolverMatch:
        """Django's ``resolve_request`` through :data:`api_resolver`: the API's own
        patterns, under the prefix the root URLconf includes them at, give the
        match the root URLconf gives (same view, arguments, name and route), without
        trying the site's patterns that come first in it (some thirty per request).
        A request whose middleware set its own ``urlconf`` is resolved as Django
        does."""
        if hasattr(request, "urlconf"):
            return super().resolve_request(request)
        match = api_resolver.resolve(request.path_info)
        request.resolver_match = match
        return match

    async def request_ended(self, response: HttpResponseBase | None) -> None:
        """End the request as Django does, in one hop to a shared sync thread,
        sending its ``request_started`` first there if no step sent it."""
        await sync_to_async(self._end)(response)

    def _end(self, response: HttpResponseBase | None) -> None:
        request_start_send()
        if response is None:
            signals.request_finished.send(sender=self.__class__)
        else:
            response.close()


def asgi_handler_with(
    middleware: list[str], handler: type[ASGIHandler] = ASGIHandler
) -> ASGIHandler:
    """Return ``handler`` (Django's ASGI handler or a subclass) with ``middleware``
    instead of settings.MIDDLEWARE.

    Django reads MIDDLEWARE once, when the handler is built (here, at import, before
    any request), so the override lasts only for the construction.
    """
    with override_settings(MIDDLEWARE=middleware):
        return handler()


api_asgi_app = asgi_handler_with(settings.API_MIDDLEWARE, ApiASGIHandler)


async def http_router(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Send API requests to the API handler and everything else to the site's
    (``/healthz``, the load balancer's check, is answered before either; so is a chat
    message POST of a session the rate limit refused in its current window, see
    :mod:`gateway.ratelimits`). A body over its cap is refused with a 413 before
    either handler reads it (:mod:`chatsite.bodycap`)."""
    if scope["path"] == HEALTH_PATH:
        await health_app(scope, receive, send)
        return
    if is_api_path(scope["path"]):
        await body_capped(api_asgi_app, scope, receive, send)
        return
    match = site_match(scope)  # resolved once, for both questions and the chain
    refusal = await ratelimits.arefusal_check(scope, match)
    if refusal is not None:
        await response_send(error_response(refusal), send)
        return
    sync = match is not None and not iscoroutinefunction(match.func)
    await body_capped(sync_site_app if sync else site_app, scope, receive, send)


site_app = (
    ASGIStaticFilesHandler(django_asgi_app)
    if settings.SERVE_STATIC
    else django_asgi_app
)


_chain_gates: weakref.WeakKeyDictionary[
    asyncio.AbstractEventLoop, asyncio.Semaphore
] = weakref.WeakKeyDictionary()


def chain_gate() -> asyncio.Semaphore:
    """The running loop's semaphore of WEB_SYNC_CONCURRENCY sync chains at once."""
    loop = asyncio.get_running_loop()
    gate = _chain_gates.get(loop)
    if gate is None:
        gate = _chain_gates[loop] = asyncio.Semaphore(settings.WEB_SYNC_CONCURRENCY)
    return gate


class SyncChainASGIHandler(StartedHookASGIHandler):
    """Django's ASGI handler with the site's middleware chain built sync, for sync
    views (every page and form POST, the chat's message POST): a request hops to a
    sync thread once and runs the whole chain and the view there.

    At most WEB_SYNC_CONCURRENCY chains run at once per process (:func:`chain_gate`);
    the next ones wait their turn on the event loop, first come first served. Without
    the gate a burst of requests (a hundred users sending at once) ran a hundred
    chains in a hundred threads taking turns on the GIL: every one of them, and the
    event loop relaying the streams already started, finished only when the last
    did; with it the first requests are answered first.

    In Django's async chain each MiddlewareMixin middleware hops to a sync thread and
    back for its request half and again for its response half (the site has ten:
    twenty hops) and the sync view once more; each hop is a thread hand-off, and
    under load a wait for the GIL. Async views (the SSE stream) keep the async chain
    (:data:`site_app`). The thread is the request's thread-sensitive one, as the
    view's was: database connections are used as before.
    """

    def __init__(self) -> None:
        # not ASGIHandler.__init__: it builds the async chain
        self.load_middleware(is_async=False)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        """Serve one HTTP request (raises ValueError for another scope type), its
        thread-sensitive calls on a kept thread (:func:`chatsite.request_threads.request_thread_lease`),
        given back when it ends (a stream's, earlier: :func:`request_thread_release`)."""
        if scope["type"] != "http":
            raise ValueError(f"Django serves HTTP only, not {scope['type']}.")
        async with ThreadSensitiveContext():
            thread = request_thread_lease()
            try:
                await self.handle(scope, receive, send)
            finally:
                if thread is not None:
                    request_thread_return(thread)

    async def request_started(self, scope: Any, request: Any) -> None:
        """Send Django's ``request_started`` for a request Django could not build
        (``request`` None: answered at once); a built request's is sent in the
        chain's hop (:meth:`_respond`), not in a hop of its own before it: its
        receivers (the database connection's age check, the query log's reset)
        are sync, so ``asend`` ran them in the request's thread, a hop there and
        back, one of the request's two."""
        if request is None:
            await super().request_started(scope, request)

    def resolve_request(self, request: HttpRequest) -> ResolverMatch:
        """The router's match of the path (:mod:`chatsite.site_match`), else
        Django's ``resolve_request``."""
        match = match_reused(request)
        if match is None:
            return super().resolve_request(request)
        request.resolver_match = match
        return match

    async def get_response_async(self, request: Any) -> HttpResponseBase:
        """Run the sync chain (:meth:`get_response`) in the request's sync thread,
        once :func:`chain_gate` lets it."""
        async with chain_gate():
            return await sync_to_async(self._respond, thread_sensitive=True)(request)

    def _respond(self, request: Any) -> HttpResponseBase:
        """Django's ``request_started`` (see :meth:`handle`), then the chain's
        response; when its body is an async stream (the chat's streamed POST) the
        thread's database connection goes back to the pool here, in the same hop
        (:func:`chatsite.db.request_connection_release`): the stream's frames run on
        the event loop, not in this thread."""
        signals.request_started.send(sender=self.__class__, scope=request.scope)
        response = self.get_response(request)
        if getattr(response, "is_async", False):
            request_connection_release()
        return response


sync_site_app = SyncChainASGIHandler()


application = ProtocolTypeRouter({"http": http_router})


web_warm()
# What start-up built (Django, the URLconf, the models, the classifier) lives as long
# as the process: moved out of the collector's scans, so the young-object collections
# a stream's frames trigger stay cheap (bench/results/2026-12-04-sse-profile.md);
# and collections come less often (settings.WEB_GC_THRESHOLDS says why).
gc.freeze()
gc.set_threshold(*settings.WEB_GC_THRESHOLDS)
services_warm_start()
