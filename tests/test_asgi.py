"""The ASGI router (chatsite/asgi.py): the API's paths, read from its URLconf, go to
the API handler, everything else to the site's."""

from __future__ import annotations

from typing import Any

import pytest
from django.http import HttpResponse
from django.urls import include, path, reverse

from chatsite import asgi
from conversations.openai import urls as api_urls

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
    await asgi.http_router({"type": "http", "path": path}, None, None)
    return got[0]


async def test_every_api_url_goes_to_the_api_handler_and_site_paths_do_not(
    monkeypatch,
):
    api_paths = [reverse(pattern.name) for pattern in api_urls.urlpatterns]
    assert api_paths == ["/v1/chat/completions", "/v1/models", "/v1/embeddings"]
    for api_path in api_paths:
        assert await _routed_to(api_path, monkeypatch) == "api"
    for site_path in SITE_PATHS:
        assert await _routed_to(site_path, monkeypatch) == "site"


def test_an_endpoint_added_to_the_api_urlconf_is_an_api_path(monkeypatch):
    monkeypatch.setattr(
        api_urls,
        "urlpatterns",
        [*api_urls.urlpatterns, path("v1/moderations", lambda r: HttpResponse())],
    )
    resolver = asgi.api_resolver_build()
    resolver.resolve("/v1/moderations")
    assert not asgi.is_api_path("/v1/moderations")  # the running one was built before


def test_the_api_prefix_is_the_one_the_root_urlconf_includes_it_under():
    nested = [path("api/", include([path("open/", include(asgi.API_URLCONF))]))]
    assert asgi.included_prefix(nested, asgi.API_URLCONF) == "api/open/"
    assert asgi.included_prefix([path("x/", include([]))], asgi.API_URLCONF) is None
    assert asgi.api_resolver.resolve("/v1/models").url_name == "api-models"
