"""Which paths the OpenAI-compatible API serves: a resolver matching exactly the
paths of :data:`API_URLCONF` where the root URLconf includes it, so the ASGI router
(:mod:`chatsite.asgi`) sends them to the API's own handler. Import once Django is set
up (the resolver is built at import: the URLconf does not change while the process
runs)."""

from __future__ import annotations

import re
from types import ModuleType
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.urls import Resolver404, URLResolver, get_resolver
from django.urls.resolvers import RegexPattern, RoutePattern

API_URLCONF = "conversations.openai.urls"


def included_prefix(patterns: list[Any], urlconf: str, prefix: str = "") -> str | None:
    """Return the path prefix (``""``: the root) under which ``patterns`` (a URLconf's
    ``urlpatterns``) include the URLconf module named ``urlconf``; None if they do not.

    Only ``path()`` includes count: a ``re_path()`` prefix is a regex, not a path.
    """
    for pattern in patterns:
        if not isinstance(pattern, URLResolver) or not isinstance(
            pattern.pattern, RoutePattern
        ):
            continue
        here = prefix + str(pattern.pattern)
        module = pattern.urlconf_module
        name = module.__name__ if isinstance(module, ModuleType) else module
        if name == urlconf:
            return here
        found = included_prefix(pattern.url_patterns, urlconf, here)
        if found is not None:
            return found
    return None


def api_resolver_build() -> URLResolver:
    """Return a resolver that matches exactly the API's paths, as the root URLconf
    includes :data:`API_URLCONF` (raises ImproperlyConfigured if it does not)."""
    prefix = included_prefix(get_resolver().url_patterns, API_URLCONF)
    if prefix is None:
        raise ImproperlyConfigured(f"The root URLconf does not include {API_URLCONF}.")
    return URLResolver(RegexPattern("^/" + re.escape(prefix)), API_URLCONF)


# Built once, at import: the URLconf does not change while the process runs.
api_resolver = api_resolver_build()


def is_api_path(path: str) -> bool:
    """Whether the API handler serves ``path`` (one of the API URLconf's paths)."""
    try:
        api_resolver.resolve(path)
    except Resolver404:
        return False
    return True
