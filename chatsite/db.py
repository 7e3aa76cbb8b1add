"""Database connections of async views: hold one only while querying.

Under ASGI every request runs its sync code (``sync_to_async``, the async ORM) in a
thread of its own, and that thread's connection stays checked out of the pool
(``chatsite.settings.base.database_pool``) until the response ends. A streamed answer
lasts seconds to minutes and needs the database only at its start and end, so async
views that stream release it in between: otherwise concurrent streams per process are
capped at ``DATABASE_POOL_MAX_SIZE`` and the next ones wait.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any, ParamSpec, TypeVar

from asgiref.sync import sync_to_async
from django.db import connection

P = ParamSpec("P")
R = TypeVar("R")


def _release() -> None:
    if not connection.in_atomic_block:
        connection.close()  # with the pool: back to the pool


def db_brief(fn: Callable[P, R]) -> Callable[P, Awaitable[R]]:
    """Return ``fn`` run through ``sync_to_async`` (the request's thread), after which
    that thread's connection goes back to the pool (outside a transaction only)."""

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        finally:
            _release()

    return sync_to_async(run)


async def db_release() -> None:
    """Give the request thread's connection back to the pool (after async ORM reads,
    ``request.auser()``), outside a transaction."""
    await sync_to_async(_release)()
