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
import functools
import logging
import threading
import weakref
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ParamSpec, TypeVar

from asgiref.sync import SyncToAsync, sync_to_async
from django.conf import settings
from django.db import InterfaceError, OperationalError, connection
from psycopg_pool import PoolTimeout

from chatsite.errors import ServiceUnavailable

logger = logging.getLogger(__name__)

P = ParamSpec("P")
R = TypeVar("R")

_gates: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
    weakref.WeakKeyDictionary()
)


def brief_gate() -> asyncio.Semaphore:
    """The running loop's semaphore of DATABASE_BRIEF_CONCURRENCY brief steps."""
    loop = asyncio.get_running_loop()
    gate = _gates.get(loop)
    if gate is None:
        gate = _gates[loop] = asyncio.Semaphore(settings.DATABASE_BRIEF_CONCURRENCY)
    return gate


def connection_return() -> None:
    """Give this thread's connection back to the pool (outside a transaction)."""
    if not connection.in_atomic_block:
        connection.close()  # with the pool: back to the pool


def connection_lost_503(exc: Exception) -> ServiceUnavailable:
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


def pool_timeout_503() -> ServiceUnavailable:
    """No pooled connection came within DATABASE_POOL_TIMEOUT_S: every connection in
    use, or PostgreSQL not reachable to open one (the pool cannot tell which). No
    connection was lost, so none is dropped and the pool is not checked."""
    return ServiceUnavailable(
        "The database is busy or not reachable right now. Nothing was lost; "
        "please try again in a few seconds.",
        code="database_unavailable",
        headers={"Retry-After": "1"},
    )


_start_pending: contextvars.ContextVar[list[Callable[[], object]] | None] = (
    contextvars.ContextVar("request_start_pending", default=None)
)


def request_start_defer(send: Callable[[], object]) -> None:
    """Have the running request's next sync step (:func:`db_brief`,
    :func:`db_quick`) call ``send`` (the request's Django ``request_started``) on
    its own thread before it runs, once; or :func:`request_start_send`, whichever
    comes first. Call on the event loop, in the request's context, before the view
    runs (its steps copy the context, and with it this request's pending call)."""
    _start_pending.set([send])


def request_start_send() -> None:
    """Call the running request's deferred ``send`` (:func:`request_start_defer`) if
    no step called it yet; a no-op otherwise and outside such a request. Safe from
    two threads at once: exactly one of them calls it."""
    pending = _start_pending.get()
    if not pending:
        return
    try:
        send = pending.pop()  # atomic: only one caller gets it
    except IndexError:
        return
    send()


def _step(fn: Callable[P, R]) -> Callable[P, R]:
    """``fn`` releasing its thread's connection afterwards (outside a transaction);
    a dead pooled connection becomes ServiceUnavailable (:func:`connection_lost_503`).
    The request's deferred ``request_started`` goes out first, on this thread
    (:func:`request_start_send`)."""

    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            request_start_send()
            return fn(*args, **kwargs)
        except (OperationalError, InterfaceError) as exc:
            if isinstance(exc.__cause__, PoolTimeout):
                raise pool_timeout_503() from exc
            if connection.connection is not None and connection.is_usable():
                raise
            raise connection_lost_503(exc) from exc
        finally:
            connection_return()

    return run


def db_brief(fn: Callable[P, R]) -> Callable[P, Awaitable[R]]:
    """Return ``fn`` run through ``sync_to_async`` (the request's thread), after which
    that thread's connection goes back to the pool (outside a transaction only).

    Steps of requests that gave their thread back (:func:`request_thread_release`:
    the streams' settlements, output moderation) run on the shared threads, at most
    DATABASE_BRIEF_CONCURRENCY at once per event loop. A request still on its own
    thread is not gated: that thread may hold a pooled connection (the middleware's
    user read), and a gated step may be waiting for one: waiting on the gate while
    holding it deadlocks once the pool is spent (every connection held by a request
    waiting on the gate, every gated step waiting on the pool, until
    DATABASE_POOL_TIMEOUT_S fails them). Gate first, then a connection; never the
    other way round.

    Raises ServiceUnavailable (503, ``database_unavailable``) when the step hit a
    dead pooled connection (the pool's other dead connections are replaced at once,
    so one request fails, not one per connection the pool held) or got none within
    DATABASE_POOL_TIMEOUT_S.
    """
    run = _step(fn)
    in_thread = sync_to_async(run)

    @functools.wraps(fn)
    async def gated(*args: Any, **kwargs: Any) -> Any:
        if not thread_released():
            # the request's own thread, which may hold a connection since its
            # middleware read the user: it must not wait on the gate, whose steps
            # may be waiting for that connection (see the docstring)
            return await in_thread(*args, **kwargs)
        async with brief_gate():
            # the shared threads: a plain executor call, without asgiref's per-call
            # work (it re-homes every context variable in the thread, each time)
            call = functools.partial(
                contextvars.copy_context().run, run, *args, **kwargs
            )
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(shared_executor(), call)

    return gated


class _SharedExecutor(ThreadPoolExecutor):
    """The process's threads for the sync steps of streaming responses: shared by
    every request, so one request's end (Django's ``ThreadSensitiveContext`` shuts its
    executor down on exit) must not shut it down."""

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Ignored: the pool lives as long as the process."""

    def __bool__(self) -> bool:
        """False: asgiref's ``ThreadSensitiveContext.__aexit__`` (each request's end)
        joins a truthy executor from a new thread, only to call the no-op
        :meth:`shutdown`: a thread started and joined per stream's end, in the
        burst of a thousand answers ending together."""
        return False


_shared: _SharedExecutor | None = None


def shared_executor() -> _SharedExecutor:
    """The process's one pool of stream-sync threads (made on first use)."""
    global _shared  # noqa: PLW0603 - one pool per process, made on first use
    if _shared is None:
        _shared = _SharedExecutor(
            max_workers=settings.DATABASE_BRIEF_CONCURRENCY,
            thread_name_prefix="stream-sync",
        )
    return _shared


def thread_released() -> bool:
    """Whether the running request gave its thread back (:func:`request_thread_release`)."""
    context = SyncToAsync.thread_sensitive_context.get(None)
    return (
        context is not None
        and _shared is not None
        and SyncToAsync.context_to_thread_executor.get(context) is _shared
    )


_connection_gone: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "request_connection_gone", default=False
)


def request_connection_release() -> None:
    """In the request's own sync thread, as its sync code ends with a response that
    streams: give that thread's connection back to the pool now (outside a
    transaction only) and note it in the request's context, so that
    :func:`request_thread_release` needs no hop back to this thread to do it (the
    note reaches the event loop's side through ``sync_to_async``'s copy of the
    context variables)."""
    if connection.in_atomic_block:
        return
    connection.close()  # with the pool: back to the pool
    _connection_gone.set(True)


async def request_thread_release() -> None:
    """Give back the request's database connection and its thread, for a response
    that streams (an SSE answer, open for seconds to minutes).

    Under ASGI Django runs a request's sync code (``sync_to_async`` with
    ``thread_sensitive=True``: middleware, ``db_brief``) in a thread of the request's
    own (asgiref's ``ThreadSensitiveContext``), kept until the response ends: a
    thread per open stream, idle while the answer streams. This returns the
    connection (in that thread), gives the thread back (a kept
    :class:`chatsite.request_threads.RequestThread` to the idle ones; any other
    ends) and sends the request's later sync calls (its ``db_brief`` steps, the response's close) to one pool of
    DATABASE_BRIEF_CONCURRENCY threads shared by every stream of the process: those
    steps hold no connection or transaction between them, so they need no thread of
    their own. Waiting then costs no thread.

    Outside an ASGI request (tests calling the relay) only the connection is
    released. Idempotent.
    """
    if thread_released():
        return
    if _connection_gone.get():  # released by the sync code that ended the request
        _connection_gone.set(False)
    else:
        await sync_to_async(connection_return)()
    context = SyncToAsync.thread_sensitive_context.get(None)
    if context is None:
        return
    executors = SyncToAsync.context_to_thread_executor
    own = executors.get(context)
    executors[context] = shared_executor()
    if own is not None:
        own.shutdown(wait=False)


def request_thread_share() -> None:
    """Send the running request's thread-sensitive sync calls (Django's signals and
    ``response.close()``, :func:`db_brief`) to the shared threads from its start, as
    :func:`request_thread_release` does for a stream once it is released: no thread
    is started for the request, and its later release needs no hop.

    For a handler whose requests never keep a connection or a transaction between
    two sync steps (the API's: its admission runs on :func:`db_quick`'s threads).
    Call inside the request's ``ThreadSensitiveContext``, before its first sync call;
    a context that has its thread already keeps it.
    """
    context = SyncToAsync.thread_sensitive_context.get(None)
    if context is not None:
        SyncToAsync.context_to_thread_executor.setdefault(context, shared_executor())


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


def db_quick(fn: Callable[P, R]) -> Callable[P, asyncio.Future[R]]:
    """Return ``fn`` run in one of the process's DATABASE_QUICK_THREADS reusable
    threads (the others wait in the pool's queue), with the caller's context
    variables; its thread's connection goes back to the pool afterwards, as with
    :func:`db_brief`.

    Calling the returned function hands the step to the pool at once and returns its
    :class:`asyncio.Future` (no task of its own, so no loop iteration passes before
    the step is queued or after its result is set): await it, or shield it as it is.
    Call it on the event loop.

    For short steps on a request's critical path (the API's admission: mostly Redis,
    the database only on a cache miss): no thread is started per request (``sync_to_
    async`` in a request starts one: its thread-sensitive executor) and the step does
    not queue behind :func:`db_brief`'s settlements. The step must not rely on the
    request's own sync thread (no transaction across steps). Raises what
    :func:`db_brief` raises.
    """
    run = _step(fn)

    @functools.wraps(fn)
    def quick(*args: Any, **kwargs: Any) -> asyncio.Future[Any]:
        call = functools.partial(contextvars.copy_context().run, run, *args, **kwargs)
        return asyncio.get_running_loop().run_in_executor(_quick_executor(), call)

    return quick


async def connection_release() -> None:
    """Give the request thread's connection back to the pool (outside a transaction).

    For a sync view that answers with a stream (the chat's streamed POST): Django
    closes a request's connection when the response ends, so the connection the view
    used would stay checked out for the whole answer; a burst of such streams would
    hold the whole pool and the next POSTs wait DATABASE_POOL_TIMEOUT_S for one.
    """
    await sync_to_async(connection_return)()
