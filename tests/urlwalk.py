"""Walk every URL pattern of the root URLconf (``get_resolver()``, recursively) and
fill its path parameters, for the security tests that call every URL.

A pattern is filled by parameter name from a ``values`` mapping (the ids of one
user's objects); a parameter the mapping lacks makes :func:`url_fill` raise
:class:`Unfillable`, so a URL added with a new kind of parameter fails the tests
until the walker knows what to put there.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from django.urls import URLPattern, URLResolver, get_resolver, resolve
from django.urls.resolvers import RegexPattern, RoutePattern

# <converter:name> or <name> in a path() route
_ROUTE_PARAM = re.compile(r"<(?:(?P<converter>[^>:]+):)?(?P<name>[^>]+)>")
_REGEX_GROUP = re.compile(r"\(\?P<(?P<name>\w+)>")


class Unfillable(AssertionError):
    """A pattern has a parameter the walker has no value for."""


@dataclass(frozen=True)
class Route:
    """One URL pattern, as the root URLconf reaches it."""

    pieces: tuple[str, ...]  # each level's pattern text (route or regex)
    kinds: tuple[str, ...]  # "route" or "regex", per level
    name: str  # namespace:name, "" when unnamed
    callback: Any

    @property
    def text(self) -> str:
        return "".join(self.pieces)

    @property
    def is_admin(self) -> bool:
        return self.text.startswith("admin/")


def routes() -> list[Route]:
    """Every URL pattern of the root URLconf, includes expanded, in order."""
    found: list[Route] = []

    def walk(patterns: list[Any], pieces: tuple, kinds: tuple, ns: str) -> None:
        for p in patterns:
            kind = "regex" if isinstance(p.pattern, RegexPattern) else "route"
            assert isinstance(p.pattern, RegexPattern | RoutePattern), p
            here = (*pieces, str(p.pattern)), (*kinds, kind)
            if isinstance(p, URLResolver):
                inner = f"{ns}{p.namespace}:" if p.namespace else ns
                walk(p.url_patterns, *here, inner)
            else:
                assert isinstance(p, URLPattern)
                name = f"{ns}{p.name}" if p.name else ""
                found.append(Route(*here, name=name, callback=p.callback))

    walk(get_resolver().url_patterns, (), (), "")
    return found


def _regex_fill(regex: str, values: dict[str, str], where: str) -> str:
    """Replace each named group of ``regex`` by its value; strip anchors and escapes."""
    out, i = "", 0
    for m in _REGEX_GROUP.finditer(regex):
        if m.start() < i:
            continue
        name = m.group("name")
        if name not in values:
            raise Unfillable(f"no value for ({name}) in {where!r}: add it to the walk")
        depth, j = 1, m.end()
        while depth:  # to the group's closing parenthesis
            depth += {"(": 1, ")": -1}.get(regex[j], 0) if regex[j - 1] != "\\" else 0
            j += 1
        out += regex[i : m.start()] + values[name]
        i = j
    out += regex[i:]
    if "(" in out.replace("\\(", ""):
        raise Unfillable(f"an unnamed group in {where!r}: the walk cannot fill it")
    return re.sub(r"\\(.)", r"\1", out.replace("^", "").replace("$", ""))


def url_fill(route: Route, values: dict[str, str]) -> str:
    """Return a path for ``route`` with each parameter taken from ``values``; check
    that it resolves to the route's own view. Raises Unfillable."""
    path = "/"
    for piece, kind in zip(route.pieces, route.kinds, strict=True):
        if kind == "regex":
            path += _regex_fill(piece, values, route.text)
            continue

        def sub(m: re.Match[str]) -> str:
            if m.group("name") not in values:
                raise Unfillable(
                    f"no value for <{m.group(0)[1:-1]}> in {route.text!r}: "
                    "add it to the walk"
                )
            return values[m.group("name")]

        path += _ROUTE_PARAM.sub(sub, piece)
    match = resolve(path)
    if match.func is not route.callback:
        raise Unfillable(f"{path!r} resolves to {match.view_name}, not {route.text!r}")
    return path
