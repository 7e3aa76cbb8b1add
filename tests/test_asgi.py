"""The ASGI router (chatsite/asgi.py): the API's paths, read from its URLconf, go to
the API handler, everything else to the site's."""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import threading
import uuid
from types import SimpleNamespace
from typing import Any

import pytest
from asgiref.sync import SyncToAsync
from django.core import signals
from django.core.handlers.asgi import ASGIHandler
from django.http import HttpResponse, StreamingHttpResponse
from django.urls import include, path, reverse
from django.utils.deprecation import MiddlewareMixin

from chatsite import api_paths, asgi
from conversations.openai import urls as api_urls
from tests.asgi_get import asgi_get

SITE_PATHS = ["/", "/login/", "/settings/", "/v1/", "/v1/models/", "/v1/modelsx"]


async def _routed_to(path: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """Send a request for ``path`` through the router; return which handler got it."""
    got: list[str] = []

    def handler(name: str) -> Any:
        async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
            got.append(name)

        return app

    monkeypatch.setattr(asgi, "api_asgi_app", handler("api"))
    monkeypatch.setattr(asgi, "site_app", handler("site"))
    monkeypatch.setattr(asgi, "sync_site_app", handler("site sync"))
    await asgi.http_router({"type": "http", "path": path}, None, None)
    return got[0]


# a value for each API route's parameters (a route without any is absent)
_SAMPLE_KWARGS: dict[str, dict[str, object]] = {
    "api-moderation-appeal": {"event_id": 7},
    "api-completion-appeal": {"completion_id": "chatcmpl-" + "0" * 32},
}


async def test_every_api_url_goes_to_the_api_handler_and_site_paths_do_not(
    monkeypatch,
):
    api_paths = [
        reverse(pattern.name, kwargs=_SAMPLE_KWARGS.get(pattern.name))
        for pattern in api_urls.urlpatterns
    ]
    assert api_paths == [
        "/v1/chat/completions",
        "/v1/models",
        "/v1/embeddings",
        "/v1/moderation/events/7/appeal",
        "/v1/moderation/completions/chatcmpl-" + "0" * 32 + "/appeal",
    ]
    for api_path in api_paths:
        assert await _routed_to(api_path, monkeypatch) == "api"
    for site_path in SITE_PATHS:
        assert await _routed_to(site_path, monkeypatch) in ("site", "site sync")


def test_the_api_handler_resolves_as_the_root_urlconf_without_the_site_s_patterns(
    monkeypatch,
):
    """Each API URL resolves in the API handler to the match the root URLconf gives
    (view, arguments, name, route, namespaces), through the API's own resolver."""
    from django.test import RequestFactory
    from django.urls import get_resolver

    roots: list[str] = []
    root = get_resolver()
    resolve = root.resolve

    def spied(path: str) -> Any:
        roots.append(path)
        return resolve(path)

    fields = ("func", "args", "kwargs", "url_name", "route", "namespaces")
    for pattern in api_urls.urlpatterns:
        api_path = reverse(pattern.name, kwargs=_SAMPLE_KWARGS.get(pattern.name))
        expected = resolve(api_path)
        monkeypatch.setattr(root, "resolve", spied)
        match = asgi.api_asgi_app.resolve_request(RequestFactory().get(api_path))
        monkeypatch.setattr(root, "resolve", resolve)
        for field in fields:
            assert getattr(match, field) == getattr(expected, field), (api_path, field)
    assert roots == []


async def test_sync_views_run_behind_one_sync_hop_and_async_views_stay_async(
    monkeypatch,
):
    """Pages and form POSTs (sync views) go to the handler whose chain starts with a
    sync-only middleware (one thread hop for the whole request); the SSE stream (an
    async view), unknown paths and static files go to the async one."""
    ids = [uuid.uuid4(), uuid.uuid4()]
    for sync_path in ["/", "/login/", reverse("message-send-new"), "/settings/"]:
        assert await _routed_to(sync_path, monkeypatch) == "site sync", sync_path
    stream = reverse("message-stream", args=ids)
    for async_path in [stream, "/static/chat.js", "/nowhere/"]:
        assert await _routed_to(async_path, monkeypatch) == "site", async_path


def test_the_sync_chain_runs_every_middleware_without_a_hop_of_its_own(monkeypatch):
    """Through the sync views' handler no MiddlewareMixin takes its async path (a
    thread hop for each half), the page is served all the same; through the async
    handler every one does."""
    hops: list[str] = []
    original = MiddlewareMixin.__acall__

    async def spy(self: Any, request: Any) -> Any:
        hops.append(type(self).__name__)
        return await original(self, request)

    monkeypatch.setattr(MiddlewareMixin, "__acall__", spy)
    assert asyncio.run(asgi_get(asgi.sync_site_app, "/login/")) == 200
    assert hops == []
    assert asyncio.run(asgi_get(asgi.django_asgi_app, "/login/")) == 200
    assert "SessionMiddleware" in hops and "CsrfViewMiddleware" in hops


def test_the_sync_chain_sends_request_started_in_its_own_hop_once(monkeypatch):
    """Django's request_started goes out once per request, in the chain's thread just
    before the chain (not in a hop of its own from the event loop); an undecodable
    request Django answers itself still sends it, as Django does."""
    events: list[tuple[str, int]] = []

    def started(**kwargs: Any) -> None:
        assert kwargs["scope"]["path"] in ("/login/", "/x/")
        events.append(("started", threading.get_ident()))

    def chain(request: Any) -> HttpResponse:
        events.append(("chain", threading.get_ident()))
        return HttpResponse("ok")

    hops: list[str] = []
    original = SyncToAsync.__call__

    async def hop(self: Any, *args: Any, **kwargs: Any) -> Any:
        hops.append(getattr(self.func, "__name__", "?"))
        return await original(self, *args, **kwargs)

    monkeypatch.setattr(SyncToAsync, "__call__", hop)
    monkeypatch.setattr(asgi.sync_site_app, "get_response", chain)
    signals.request_started.connect(started)
    try:
        assert asyncio.run(asgi_get(asgi.sync_site_app, "/login/")) == 200
        loop_thread = threading.get_ident()
        assert [e[0] for e in events] == ["started", "chain"]
        assert hops == ["_respond", "close"]  # the chain's hop, the response's close
        assert events[0][1] == events[1][1] != loop_thread
        events.clear()
        monkeypatch.setattr(
            asgi.sync_site_app,
            "create_request",
            lambda scope, body: (None, HttpResponse(status=400)),
        )
        assert asyncio.run(asgi_get(asgi.sync_site_app, "/x/")) == 400
        assert [e[0] for e in events] == ["started"]
    finally:
        signals.request_started.disconnect(started)


@pytest.fixture
def request_signals(monkeypatch):
    """Record Django's request signals (name, thread) and every asgiref hop (the
    function's name) while a test runs: ``(events, hops)``."""
    events: list[tuple[str, int]] = []

    def started(**kwargs: Any) -> None:
        events.append(("started", threading.get_ident()))

    def finished(**kwargs: Any) -> None:
        events.append(("finished", threading.get_ident()))

    hops: list[str] = []
    original = SyncToAsync.__call__

    async def hop(self: Any, *args: Any, **kwargs: Any) -> Any:
        hops.append(getattr(self.func, "__name__", "?"))
        return await original(self, *args, **kwargs)

    monkeypatch.setattr(SyncToAsync, "__call__", hop)
    signals.request_started.connect(started)
    signals.request_finished.connect(finished)
    yield events, hops
    signals.request_started.disconnect(started)
    signals.request_finished.disconnect(finished)


def test_the_api_sends_request_started_in_its_first_step_on_that_step_s_thread(
    monkeypatch, request_signals
):
    """No hop before an API view: Django's request_started goes out once, as the
    view's first sync step starts, on that step's thread (never the loop's), then
    request_finished as the response closes."""
    from conversations.openai import views

    steps: list[int] = []
    models = views._models

    def step(request: Any) -> Any:
        steps.append(threading.get_ident())
        return models(request)

    monkeypatch.setattr(views, "_models", step)
    events, hops = request_signals
    assert asyncio.run(asgi_get(asgi.api_asgi_app, "/v1/models")) == 401  # no key
    loop_thread = threading.get_ident()
    assert [e[0] for e in events] == ["started", "finished"]
    assert events[0][1] == steps[0] != loop_thread
    assert events[1][1] != loop_thread
    # the response's close, after the answer (and Django's log of a 4xx, which it
    # writes from a thread of its own)
    assert [h for h in hops if h != "log_response"] == ["_end"]


def test_an_api_request_without_a_step_sends_request_started_as_it_ends(
    request_signals,
):
    """A request answered before any sync step (a 405) still sends request_started
    once, before request_finished, in the hop that closes its response."""
    events, hops = request_signals
    assert asyncio.run(asgi_get(asgi.api_asgi_app, "/v1/chat/completions")) == 405
    loop_thread = threading.get_ident()
    assert [e[0] for e in events] == ["started", "finished"]
    assert events[0][1] == events[1][1] != loop_thread
    assert [h for h in hops if h != "log_response"] == ["_end"]


def test_an_endpoint_added_to_the_api_urlconf_is_an_api_path(monkeypatch):
    monkeypatch.setattr(
        api_urls,
        "urlpatterns",
        [*api_urls.urlpatterns, path("v1/moderations", lambda r: HttpResponse())],
    )
    resolver = api_paths.api_resolver_build()
    resolver.resolve("/v1/moderations")
    assert not api_paths.is_api_path(
        "/v1/moderations"
    )  # the running one was built before


def test_the_api_prefix_is_the_one_the_root_urlconf_includes_it_under():
    nested = [path("api/", include([path("open/", include(api_paths.API_URLCONF))]))]
    assert api_paths.included_prefix(nested, api_paths.API_URLCONF) == "api/open/"
    assert (
        api_paths.included_prefix([path("x/", include([]))], api_paths.API_URLCONF)
        is None
    )
    assert api_paths.api_resolver.resolve("/v1/models").url_name == "api-models"


@pytest.mark.parametrize("streamed", [True, False])
def test_the_sync_chain_gives_a_streamed_response_s_connection_back_in_its_hop(
    monkeypatch, streamed
):
    """A sync view's response whose body is an async stream (the chat's streamed
    POST): the chain's hop gives the thread's connection back before returning; any
    other response keeps it until the request ends, as Django does."""
    released: list[bool] = []
    monkeypatch.setattr(
        asgi, "request_connection_release", lambda: released.append(True)
    )

    async def frames():
        yield "data: 1\n\n"

    response = StreamingHttpResponse(frames()) if streamed else HttpResponse("ok")
    monkeypatch.setattr(asgi.sync_site_app, "get_response", lambda request: response)
    assert asgi.sync_site_app._respond(SimpleNamespace(scope={})) is response
    assert released == ([True] if streamed else [])


def test_at_most_web_sync_concurrency_chains_run_at_once(monkeypatch, settings):
    """A burst of sync requests: WEB_SYNC_CONCURRENCY chains run, the others wait on
    the event loop (no thread of theirs runs the chain) and are served after."""
    settings.WEB_SYNC_CONCURRENCY = 2
    lock, go = threading.Lock(), threading.Event()
    started: list[str] = []
    running = most = 0

    def chain(request: Any) -> HttpResponse:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
            started.append(request.path)
        go.wait(30)
        with lock:
            running -= 1
        return HttpResponse("ok")

    monkeypatch.setattr(asgi.sync_site_app, "get_response", chain)

    async def burst() -> list[int]:
        requests = [
            asyncio.create_task(asgi_get(asgi.sync_site_app, f"/r{i}/"))
            for i in range(5)
        ]
        while len(started) < 2:  # the first two chains are in
            await asyncio.sleep(0.01)
        for _ in range(20):  # the others had every chance to start, and did not
            await asyncio.sleep(0.01)
        assert len(started) == 2
        go.set()
        return await asyncio.gather(*requests)

    assert asyncio.run(burst()) == [200] * 5
    assert most == 2 and sorted(started) == [f"/r{i}/" for i in range(5)]


def test_the_handlers_follow_the_installed_django_s_handle():
    """StartedHookASGIHandler.handle is Django 5.2's ASGIHandler.handle but for
    where request_started's receivers run: a Django whose handle() changed must be
    followed there (then update this digest)."""
    source = inspect.getsource(ASGIHandler.handle).encode()
    assert hashlib.sha256(source).hexdigest()[:16] == "98faeb5bef800331"
