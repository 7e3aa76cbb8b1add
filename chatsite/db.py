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
from django.db import InterfaceError, OperationalError, connection

from chatsite.errors import ServiceUnavailable

P = ParamSpec("P")
R = TypeVar("R")


def _release() -> None:
    if not connection.in_atomic_block:
        connection.close()  # with the pool: back to the pool


def _connection_lost(exc: Exception) -> ServiceUnavailable:
    """A step failed on a dead connection (PostgreSQL restarted, failed over or closed
    it): drop it, have the pool test its idle connections now and replace the dead
    ones (``ConnectionPool.check``, no back-off), and fail this request with a 503."""
    pool = getattr(connection, "pool", None)
    connection.close()  # the pool discards a broken connection
    if pool is not None:
        pool.check()
    return ServiceUnavailable(
        "The database connection was lost. Please try again.",
        code="database_unavailable",
        headers={"Retry-After": "1"},
    )


def db_brief(fn: Callable[P, R]) -> Callable[P, Awaitable[R]]:
    """Return ``fn`` run through ``sync_to_async`` (the request's thread), after which
    that thread's connection goes back to the pool (outside a transaction only).

    Raises ServiceUnavailable (503) when the step hit a dead pooled connection; the
    pool's other dead connections are replaced at once, so one request fails, not one
    per connection the pool held.
    """

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (OperationalError, InterfaceError) as exc:
            if connection.connection is not None and connection.is_usable():
                raise
            raise _connection_lost(exc) from exc
        finally:
            _release()

    return sync_to_async(run)


async def db_release() -> None:
    """Give the request thread's connection back to the pool (after async ORM reads,
    ``request.auser()``), outside a transaction."""
    await sync_to_async(_release)()
