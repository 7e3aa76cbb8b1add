"""The site URLconf's match of a request, resolved once per request on the event loop
and used again by the sync chain.

The router (:func:`chatsite.asgi.http_router`) resolves a site path to choose its
handler and to check the rate limit's refusal; Django's handler then resolved the same
path again in the request's sync thread (``BaseHandler.resolve_request``), some thirty
patterns tried a second time. :func:`site_match` keeps its match in the ASGI scope,
under :data:`SCOPE_KEY`, with the resolver and path it came from;
:func:`match_reused` gives it back to the handler when Django would resolve the same
path with the same resolver, so the view gets the very match Django's resolve would
have given.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from django.urls import Resolver404, ResolverMatch, URLResolver, get_resolver

# an extension key of the ASGI scope: (resolver, path, match)
SCOPE_KEY = "chatsite.site_match"


def site_match(scope: dict[str, Any]) -> ResolverMatch | None:
    """``scope["path"]`` resolved in the site's URLconf (None: no route); a match is
    kept in ``scope`` for :func:`match_reused`."""
    resolver = get_resolver()
    path = scope["path"]
    try:
        match = resolver.resolve(path)
    except Resolver404:
        return None
    scope[SCOPE_KEY] = (resolver, path, match)
    return match


def match_reused(request: HttpRequest) -> ResolverMatch | None:
    """The match :func:`site_match` kept for ``request``'s scope when it is the one
    Django's ``resolve_request`` would find: the request has no ``urlconf`` of its own,
    the thread's resolver is the one used and ``path_info`` the path resolved. None
    otherwise (resolve as Django does)."""
    kept = getattr(request, "scope", {}).get(SCOPE_KEY)
    if kept is None or hasattr(request, "urlconf"):
        return None
    resolver, path, match = kept
    resolver_now: URLResolver = get_resolver()
    if resolver_now is not resolver or request.path_info != path:
        return None
    return match
