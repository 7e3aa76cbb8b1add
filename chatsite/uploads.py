"""Uploaded files keep a readable name.

Django cuts an upload's name after its last ``/`` or ``\\`` anywhere in it, so
``../../etc/<b>passwd</b>.txt`` arrived as ``b>.txt``: the cut fell inside the
markup, not at the end of the path. Here only the leading directories are dropped
(:func:`upload_file_name`); the name is never a path on our side (it is stored as a
title and shown escaped).
"""

from __future__ import annotations

import functools
import html
import re
from typing import Any

from asgiref.sync import iscoroutinefunction
from django.http import HttpRequest, HttpResponse
from django.http.multipartparser import MultiPartParser
from django.utils.datastructures import ImmutableList
from django.utils.decorators import sync_and_async_middleware

# Leading directories: segments ending in a separator, with no markup in them.
_DIRECTORIES = re.compile(r"^(?:[^/\\<>]*[/\\])+")
# What a separator left inside the name becomes (Django's UploadedFile would cut the
# name there): look-alikes that are not separators.
_SEPARATORS = str.maketrans({"/": "\u2215", "\\": "\u29f5"})


def upload_file_name(raw: str) -> str:
    """Return the name to keep of an upload named ``raw`` (its multipart ``filename``).

    Leading directory segments (``../``, ``C:\\Users\\``: segments without ``<`` or
    ``>``) are dropped; a separator left inside the name becomes U+2215 / U+29F5;
    characters that do not print are removed. "" when nothing is left, or only
    ``.`` or ``..``. ``../../etc/<b>passwd</b>.txt`` -> ``<b>passwd<∕b>.txt``.
    """
    name = _DIRECTORIES.sub("", raw).translate(_SEPARATORS)
    name = "".join(c for c in name if c.isprintable()).strip()
    return "" if name in {".", ".."} else name


class ReadableNameParser(MultiPartParser):
    """Django's multipart parser, naming files by :func:`upload_file_name`."""

    def sanitize_file_name(self, file_name: str) -> str | None:
        # Django's own unescapes HTML entities first (names some browsers encoded)
        return upload_file_name(html.unescape(file_name)) or None


def _parse_file_upload(
    request: HttpRequest, meta: Any, post_data: Any
) -> tuple[Any, Any]:
    """``HttpRequest.parse_file_upload`` with :class:`ReadableNameParser`."""
    request.upload_handlers = ImmutableList(
        request.upload_handlers,
        warning="You cannot alter upload handlers after the upload has been processed.",
    )
    parser = ReadableNameParser(
        meta, post_data, request.upload_handlers, request.encoding
    )
    return parser.parse()


@sync_and_async_middleware
def readable_upload_names(get_response: Any) -> Any:
    """Parse the request's multipart body with :class:`ReadableNameParser` (before
    CsrfViewMiddleware, which may read the form first)."""

    def wire(request: HttpRequest) -> None:
        if request.content_type != "multipart/form-data":
            return  # no file in it: nothing to name (most requests)
        request.parse_file_upload = functools.partial(  # type: ignore[method-assign]
            _parse_file_upload, request
        )

    if iscoroutinefunction(get_response):

        async def amiddleware(request: HttpRequest) -> HttpResponse:
            wire(request)
            return await get_response(request)

        return amiddleware

    def middleware(request: HttpRequest) -> HttpResponse:
        wire(request)
        return get_response(request)

    return middleware
