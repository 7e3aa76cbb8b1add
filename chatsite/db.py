"""Database connections of async views: hold one only while querying.

Under ASGI every request runs its sync code (``sync_to_async``, the async ORM) in a
thread of its own, and that thread's connection stays checked out of the pool
(``chatsite.settings.base.database_pool``) until the response ends. A streamed answer
lasts seconds to minutes and needs the database only at its start and end, so async
views that stream release it in between: otherwise concurrent streams per process are
capped at ``DATABASE_POOL_MAX_SIZE`` and the next ones wait.

Those brief steps come in bursts (a thousand answers ending together, each settling),
so at most DATABASE_BRIEF_CONCURRENCY of them run at once per event loop; the others
wait on the loop. Without the gate each would run in its request's own thread at
once: hundreds of threads take turns on the GIL while the few holding a pooled
connection wait for it, and the last ``done`` frame comes seconds late (the "done
lag" of docs/benchmarks.md).
"""

from __future__ import annotations

import asyncio
import contextvars
import datetime as dt
import functools
import threading
import weakref
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ParamSpec, TypeVar

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import InterfaceError, OperationalError, connection

from chatsite.errors import ServiceUnavailable

P = ParamSpec("P")
R = TypeVar("R")

_gates: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
    weakref.WeakKeyDictionary()
)


def _gate() -> asyncio.Semaphore:
    """The running loop's semaphore of DATABASE_BRIEF_CONCURRENCY brief steps."""
    loop = asyncio.get_running_loop()
    gate = _gates.get(loop)
    if gate is None:
        gate = _gates[loop] = asyncio.Semaphore(settings.DATABASE_BRIEF_CONCURRENCY)
    return gate


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


def _step(fn: Callable[P, R]) -> Callable[P, R]:
    """``fn`` releasing its thread's connection afterwards (outside a transaction);
    a dead pooled connection becomes ServiceUnavailable (:func:`_connection_lost`)."""

    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (OperationalError, InterfaceError) as exc:
            if connection.connection is not None and connection.is_usable():
                raise
            raise _connection_lost(exc) from exc
        finally:
            _release()

    return run


def db_brief(fn: Callable[P, R]) -> Callable[P, Awaitable[R]]:
    """Return ``fn`` run through ``sync_to_async`` (the request's thread), after which
    that thread's connection goes back to the pool (outside a transaction only); at
    most DATABASE_BRIEF_CONCURRENCY such steps run at once per event loop.

    Raises ServiceUnavailable (503) when the step hit a dead pooled connection; the
    pool's other dead connections are replaced at once, so one request fails, not one
    per connection the pool held.
    """
    in_thread = sync_to_async(_step(fn))

    @functools.wraps(fn)
    async def gated(*args: Any, **kwargs: Any) -> Any:
        async with _gate():
            return await in_thread(*args, **kwargs)

    return gated


_quick: ThreadPoolExecutor | None = None
_quick_lock = threading.Lock()


def _quick_executor() -> ThreadPoolExecutor:
    """The process's pool of DATABASE_QUICK_THREADS reusable threads."""
    global _quick
    if _quick is None:
        with _quick_lock:
            if _quick is None:
                _quick = ThreadPoolExecutor(
                    max_workers=settings.DATABASE_QUICK_THREADS,
                    thread_name_prefix="db-quick",
                )
    return _quick


def db_quick(fn: Callable[P, R]) -> Callable[P, Awaitable[R]]:
    """Return ``fn`` run in one of the process's DATABASE_QUICK_THREADS reusable
    threads (the others wait on the event loop), with the caller's context variables;
    its thread's connection goes back to the pool afterwards, as with
    :func:`db_brief`.

    For short steps on a request's critical path (the API's admission: mostly Redis,
    the database only on a cache miss): no thread is started per request (``sync_to_
    async`` in a request starts one: its thread-sensitive executor) and the step does
    not queue behind :func:`db_brief`'s settlements. The step must not rely on the
    request's own sync thread (no transaction across steps). Raises what
    :func:`db_brief` raises.
    """
    run = _step(fn)

    @functools.wraps(fn)
    async def quick(*args: Any, **kwargs: Any) -> Any:
        call = functools.partial(contextvars.copy_context().run, run, *args, **kwargs)
        return await asyncio.get_running_loop().run_in_executor(_quick_executor(), call)

    return quick


async def connection_release() -> None:
    """Give the request thread's connection back to the pool (outside a transaction).

    For a sync view that answers with a stream (the chat's streamed POST): Django
    closes a request's connection when the response ends, so the connection the view
    used would stay checked out for the whole answer; a burst of such streams would
    hold the whole pool and the next POSTs wait DATABASE_POOL_TIMEOUT_S for one.
    """
    await sync_to_async(_release)()


def _readable_loader(base: type[Any]) -> type[Any]:
    """A subclass of the psycopg timestamptz loader ``base`` that reads a time Python
    cannot hold (past year 9999 or before year 1, ``infinity``) as the nearest end of
    the storable range (:data:`chatsite.storable.YEAR_MIN` / ``YEAR_MAX``, UTC)
    instead of raising ``DataError``."""
    from psycopg import DataError

    from chatsite.storable import YEAR_MAX, YEAR_MIN

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
