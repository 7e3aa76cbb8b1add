"""What the database and Python can store and read back: the one check every input
passes before anything is stored (CONVENTIONS §3, "validate at the edge").

- Text: no NUL (PostgreSQL's ``text`` cannot hold ``\\0``) and no unpaired UTF-16
  surrogate (``\\ud800``-``\\udfff``: JSON may escape one, Python decodes it into a
  ``str`` that UTF-8, and so psycopg, Redis and every response, cannot encode).
- Times: after conversion to UTC, within years :data:`YEAR_MIN`..:data:`YEAR_MAX`
  (Python's ``datetime`` ends at year 9999, so a time PostgreSQL stores past it can
  never be read back; the narrower range keeps display and arithmetic safe too).

:func:`text_problem` and :func:`datetime_problem` return a problem in words (None:
storable) for callers that word their own error (the import names the place in the
file); :func:`value_check`, :func:`datetime_check` raise
:class:`~chatsite.errors.InvalidInput` (400 ``invalid_character`` or
``invalid_date``).
:func:`storable_input` is the site's middleware that applies :func:`value_check` to
every form field, query parameter, uploaded file name and JSON body.
:func:`timestamps_readable` lets a connection read a time stored before that check.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from asgiref.sync import iscoroutinefunction, sync_to_async
from django.http import HttpRequest, HttpResponse
from django.utils.decorators import sync_and_async_middleware

from chatsite.errors import InvalidInput, error_refusal

# The years a stored time may fall in, in UTC (inclusive).
YEAR_MIN = 1970
YEAR_MAX = 2200
# The error codes: text with a NUL or a lone surrogate, a time out of range.
CODE_TEXT = "invalid_character"
CODE_DATE = "invalid_date"
# Methods whose input may be stored.
_WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})
# Nesting deeper than this is not walked (Python's JSON parser stops far earlier
# than the interpreter's recursion limit only for objects this deep anyway).
_MAX_DEPTH = 200


def text_problem(text: str) -> str | None:
    """Return why ``text`` cannot be stored ("contains a NUL character", "contains an
    unpaired UTF-16 surrogate"), or None."""
    if "\x00" in text:
        return "contains a NUL character (\\0), which cannot be stored"
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            return (
                "contains an unpaired UTF-16 surrogate (\\ud800-\\udfff), which is "
                "not valid Unicode text"
            )
    return None


def datetime_problem(value: dt.datetime) -> str | None:
    """Return why the time ``value`` cannot be stored (naive: taken as UTC), or None.

    Out of range: before :data:`YEAR_MIN` or after :data:`YEAR_MAX` once converted
    to UTC (a year-9999 time 14 hours west of UTC is in year 10000 in UTC).
    """
    aware = value if value.tzinfo else value.replace(tzinfo=dt.UTC)
    try:
        year = aware.astimezone(dt.UTC).year
    except OverflowError:
        year = 0 if value.year < YEAR_MIN else YEAR_MAX + 1
    if not YEAR_MIN <= year <= YEAR_MAX:
        return f"is outside the years {YEAR_MIN} to {YEAR_MAX} (UTC)"
    return None


def _unstorable(where: str, problem: str, code: str) -> InvalidInput:
    return InvalidInput(
        f"{where} {problem}. Nothing was saved; correct it and try again.", code=code
    )


def datetime_check(value: dt.datetime, *, where: str) -> dt.datetime:
    """Return ``value`` in UTC; raise InvalidInput (400 ``invalid_character`` / ``invalid_date``) when
    :func:`datetime_problem` finds one. ``where`` names the field for the message."""
    problem = datetime_problem(value)
    if problem:
        raise _unstorable(where, problem, CODE_DATE)
    aware = value if value.tzinfo else value.replace(tzinfo=dt.UTC)
    return aware.astimezone(dt.UTC)


def value_check(value: Any, *, where: str = "The request") -> None:
    """Raise InvalidInput (400 ``invalid_character`` / ``invalid_date``) when any string in ``value`` (a
    str, or dicts and lists of them, keys included, as JSON decodes) or any datetime
    cannot be stored (:func:`text_problem`, :func:`datetime_problem`)."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            problem = text_problem(item)
            if problem:
                raise _unstorable(where, problem, CODE_TEXT)
        elif isinstance(item, dt.datetime):
            datetime_check(item, where=where)
        elif depth < _MAX_DEPTH and isinstance(item, dict):
            stack.extend((k, depth + 1) for k in item)
            stack.extend((v, depth + 1) for v in item.values())
        elif depth < _MAX_DEPTH and isinstance(item, list | tuple):
            stack.extend((v, depth + 1) for v in item)


def _json_body(request: HttpRequest) -> Any:
    """The decoded JSON body of a JSON request, or None (not JSON, or not valid: the
    view answers that itself)."""
    if request.content_type != "application/json":
        return None
    try:
        return json.loads(request.body or b"null")
    except (ValueError, RecursionError):
        return None


def request_check(request: HttpRequest) -> None:
    """Apply :func:`value_check` to what a writing request (POST, PUT, PATCH, DELETE)
    carries: query parameters, form fields, uploaded files' names, a JSON body.
    Raises InvalidInput; reads nothing for other methods."""
    if request.method not in _WRITES:
        return
    value_check(dict(request.GET.lists()), where="A parameter of the address")
    if request.method == "POST" and request.content_type in (
        "application/x-www-form-urlencoded",
        "multipart/form-data",
    ):
        value_check(dict(request.POST.lists()), where="A field of the form")
        names = [f.name or "" for files in request.FILES.lists() for f in files[1]]
        value_check(names, where="The file's name")
    value_check(_json_body(request), where="A field of the request")


@sync_and_async_middleware
def storable_input(get_response: Any) -> Any:
    """Refuse a writing request whose input cannot be stored (:func:`request_check`)
    with a 400 ``invalid_character`` / ``invalid_date`` before its view runs
    (:func:`chatsite.errors.error_refusal`: a page for a browser's page request,
    else JSON). The check is CPU work on the
    request's own body (no thread hop in async mode); only a refusal's page is
    rendered in a thread."""

    if iscoroutinefunction(get_response):

        async def amiddleware(request: HttpRequest) -> HttpResponse:
            try:
                request_check(request)
            except InvalidInput as exc:  # the page reads the session user: a thread
                return await sync_to_async(error_refusal)(request, exc)
            response: HttpResponse = await get_response(request)
            return response

        return amiddleware

    def middleware(request: HttpRequest) -> HttpResponse:
        try:
            request_check(request)
        except InvalidInput as exc:
            return error_refusal(request, exc)
        response: HttpResponse = get_response(request)
        return response

    return middleware


__all__: list[str] = [
    "YEAR_MAX",
    "YEAR_MIN",
    "datetime_check",
    "datetime_problem",
    "request_check",
    "storable_input",
    "text_problem",
    "value_check",
]


def _readable_loader(base: type[Any]) -> type[Any]:
    """A subclass of the psycopg timestamptz loader ``base`` that reads a time Python
    cannot hold (past year 9999 or before year 1, ``infinity``) as the nearest end of
    the storable range (:data:`chatsite.storable.YEAR_MIN` / ``YEAR_MAX``, UTC)
    instead of raising ``DataError``."""
    from psycopg import DataError

    class ReadableTimestamptzLoader(base):
        readable = True

        def load(self, data: Any) -> Any:
            try:
                return super().load(data)
            except DataError:
                # text format (Django's): "-infinity", "...-01-01 00:00:00+00 BC"
                raw = bytes(data)
                low = raw.startswith(b"-") or raw.endswith(b" BC")
                year = YEAR_MIN if low else YEAR_MAX
                moment = dt.datetime(year, 1 if low else 12, 1 if low else 31)
                return moment.replace(tzinfo=dt.UTC)

    return ReadableTimestamptzLoader


def timestamps_readable(sender: Any, connection: Any, **kwargs: Any) -> None:
    """``connection_created`` receiver: let ``connection`` read every stored time.

    A ``timestamptz`` PostgreSQL holds but Python's ``datetime`` cannot (a year-10000
    time stored before the input check of :mod:`chatsite.storable`, ``infinity``)
    would make every page, search and export that reads its row a 500; it is read as
    the storable range's nearest end instead (:func:`_readable_loader`). The loader
    wraps the one Django registered on the connection (its time zone handling).
    """
    if connection.vendor != "postgresql" or connection.connection is None:
        return
    from psycopg.pq import Format

    adapters = connection.connection.adapters
    oid = adapters.types["timestamptz"].oid
    base = adapters.get_loader(oid, Format.TEXT)  # Django reads in text format only
    if base is not None and not getattr(base, "readable", False):
        adapters.register_loader(oid, _readable_loader(base))
