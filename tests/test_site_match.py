"""The site's URL match resolved once per request (chatsite/site_match.py): the router's
match is the one the sync chain's view gets, and Django's own resolve runs where the
kept match might not be the one it would find."""

from __future__ import annotations

import asyncio
from typing import Any

from django.http import HttpResponse
from django.test import RequestFactory
from django.urls import get_resolver

from chatsite import asgi
from chatsite.site_match import SCOPE_KEY, match_reused, site_match
from tests.asgi_get import asgi_get, get_scope


def _resolves(monkeypatch) -> list[str]:
    """Record every path the root resolver resolves from now on."""
    root = get_resolver()
    resolve = root.resolve
    paths: list[str] = []

    def spied(path: str) -> Any:
        paths.append(path)
        return resolve(path)

    monkeypatch.setattr(root, "resolve", spied)
    return paths


def test_a_sync_page_is_resolved_once_and_its_view_gets_the_router_s_match(
    monkeypatch,
):
    seen: list[Any] = []
    resolve_request = asgi.sync_site_app.resolve_request

    def spy(request: Any) -> Any:
        match = resolve_request(request)
        seen.append(request.resolver_match)
        return match

    monkeypatch.setattr(asgi.sync_site_app, "resolve_request", spy)
    expected = get_resolver().resolve("/login/")
    paths = _resolves(monkeypatch)
    scope = get_scope("/login/")
    assert asyncio.run(asgi_get(asgi.http_router, scope)) == 200
    assert paths == ["/login/"]  # the router's; not again in the chain
    assert seen == [scope[SCOPE_KEY][2]]
    match = seen[0]
    assert (match.func, match.args, match.kwargs, match.url_name, match.route) == (
        expected.func,
        expected.args,
        expected.kwargs,
        expected.url_name,
        expected.route,
    )


def test_a_path_with_no_route_keeps_nothing():
    scope = get_scope("/nowhere/")
    assert site_match(scope) is None
    assert SCOPE_KEY not in scope


def test_django_resolves_when_the_kept_match_may_not_be_its_own(monkeypatch):
    """Another path (a script prefix), a request URLconf, another resolver or a
    request built without a scope: Django's resolve, not the kept match."""
    scope = get_scope("/login/")
    kept = site_match(scope)
    assert kept is not None
    request = asgi.sync_site_app.create_request(scope, _body())[0]
    assert match_reused(request) is kept

    prefixed = get_scope("/app/login/", root_path="/app")
    site_match(prefixed)  # resolved "/app/login/": not the path Django resolves
    request = asgi.sync_site_app.create_request(prefixed, _body())[0]
    assert request.path_info == "/login/"
    assert match_reused(request) is None

    request = asgi.sync_site_app.create_request(scope, _body())[0]
    request.urlconf = "chatsite.urls"
    assert match_reused(request) is None

    request = asgi.sync_site_app.create_request(scope, _body())[0]
    monkeypatch.setattr("chatsite.site_match.get_resolver", lambda: object())
    assert match_reused(request) is None

    assert match_reused(RequestFactory().get("/login/")) is None


def test_the_chain_resolves_as_django_when_nothing_was_kept(monkeypatch):
    monkeypatch.setattr(asgi.sync_site_app, "get_response", lambda r: HttpResponse())
    request = RequestFactory().get("/login/")
    match = asgi.sync_site_app.resolve_request(request)
    assert request.resolver_match is match
    assert match.url_name == get_resolver().resolve("/login/").url_name


def _body() -> Any:
    import io

    return io.BytesIO(b"")
