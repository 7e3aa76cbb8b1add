"""Brief database steps of many streams in batches (:func:`db_batched`,
:func:`db_bulk`): a thousand answers ending together share thread hand-offs and
pooled connections, up to BATCH_MAX calls a batch and BATCH_PARALLEL batches at once
per event loop, each behind :mod:`chatsite.db`'s gate of brief steps.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, ParamSpec, TypeVar

from django.db import InterfaceError, OperationalError, connection

from chatsite.db import (
    brief_gate,
    connection_lost_503,
    connection_return,
    db_brief,
    shared_executor,
    thread_released,
)

logger = logging.getLogger(__name__)

P = ParamSpec("P")
R = TypeVar("R")

# Calls of one db_batched function per batch, and batches of it running at once per
# loop: 1,000 answers ending together settle in 4 batches run at once, not 16 in four
# waves (each wave waited for the slowest batch of the one before)
BATCH_MAX = 256
BATCH_PARALLEL = 4


def call_alone(
    fn: Callable[..., Any], context: contextvars.Context, args: tuple, kwargs: dict
) -> tuple[bool, Any]:
    """Run one batched call of ``fn`` in its caller's ``context``: ``(True, value)``,
    or ``(False, exception)`` (a dead pooled connection's error as ServiceUnavailable,
    :func:`connection_lost_503`). For a bulk function's items that take the path of one."""
    try:
        return True, context.run(fn, *args, **kwargs)
    except (OperationalError, InterfaceError) as exc:
        if connection.connection is not None and connection.is_usable():
            return False, exc
        return False, connection_lost_503(exc)
    except Exception as exc:  # noqa: BLE001 - it fails its own call only
        return False, exc


def _run_calls(
    fn: Callable[..., Any], calls: list[tuple[contextvars.Context, tuple, dict]]
) -> list[tuple[bool, Any]]:
    """Run ``fn`` once per call (each in its caller's context), then release the
    thread's connection; each result is ``(True, value)`` or ``(False, exception)``."""
    try:
        return [
            call_alone(fn, context, args, kwargs) for context, args, kwargs in calls
        ]
    finally:
        connection_return()


BulkCalls = list[tuple[contextvars.Context, tuple, dict]]


def _run_bulk(
    bulk: Callable[[BulkCalls], list[tuple[bool, Any]]],
    fn: Callable[..., Any],
    calls: BulkCalls,
) -> list[tuple[bool, Any]]:
    """Run ``bulk`` once over the batch's ``calls``; if it raises (it should not: it
    answers each call with a result), each call runs alone through ``fn``. Then the
    thread's connection is released."""
    try:
        try:
            results = bulk(calls)
            if len(results) != len(calls):
                raise RuntimeError("a bulk step answered a different number of calls")
        except Exception:  # noqa: BLE001 - the calls are run one by one instead
            logger.exception("a bulk step failed; its calls run one by one")
            return [call_alone(fn, c, a, k) for c, a, k in calls]
        return results
    finally:
        connection_return()


@dataclass
class _Batches:
    pending: list[tuple[contextvars.Context, tuple, dict, asyncio.Future[Any]]] = field(
        default_factory=list
    )
    running: int = 0
    tasks: set[asyncio.Task[None]] = field(default_factory=set)  # the loop's are weak


def db_batched(fn: Callable[P, R]) -> Callable[P, Awaitable[R]]:
    """:func:`db_brief` for steps that come in bursts (a thousand answers ending
    together, each settling and reading its final state): on a request that gave its
    thread back (:func:`request_thread_release`), the calls that arrive while a batch
    runs go together in the next one, up to BATCH_MAX, with BATCH_PARALLEL batches at
    once: one thread hand-off, one pooled connection and one pass of the gate per
    batch instead of per call. Each call is still its own ``fn`` call (its own
    transaction, in its caller's context) and an exception fails only its own call.
    Elsewhere (tests, sync callers' threads) the same as :func:`db_brief`.
    """
    return _batcher(fn, functools.partial(_run_calls, fn))


def db_bulk(
    bulk: Callable[[BulkCalls], list[tuple[bool, Any]]], fn: Callable[P, R]
) -> Callable[P, Awaitable[R]]:
    """:func:`db_batched` whose batch is one ``bulk`` call: ``bulk(calls)`` gets the
    batch's calls of ``fn`` (``[(context, args, kwargs)]``, in arrival order) and
    answers each, in order, with ``(True, value)`` or ``(False, exception)``, as
    ``fn`` would have (so it can write the batch in one transaction and send the
    calls it cannot take to ``fn`` alone, :func:`call_alone`). ``bulk`` runs in the
    batch's own context, not a caller's. If ``bulk`` raises, every call of the batch
    runs alone through ``fn``. Outside a released request each call is ``fn`` through
    :func:`db_brief`.
    """
    return _batcher(fn, functools.partial(_run_bulk, bulk, fn))


def _batcher(
    fn: Callable[P, R], run_batch: Callable[[BulkCalls], list[tuple[bool, Any]]]
) -> Callable[P, Awaitable[R]]:
    """``fn`` batched as :func:`db_batched` says, each batch run by ``run_batch``."""
    brief = db_brief(fn)
    per_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Batches] = (
        weakref.WeakKeyDictionary()
    )

    async def drain(state: _Batches) -> None:
        loop = asyncio.get_running_loop()
        try:
            while state.pending:
                batch = state.pending[:BATCH_MAX]
                del state.pending[:BATCH_MAX]
                calls = [(c, a, k) for c, a, k, _f in batch]
                try:
                    async with brief_gate():
                        results = await loop.run_in_executor(
                            shared_executor(), functools.partial(run_batch, calls)
                        )
                except BaseException as exc:  # noqa: BLE001 - every caller hears of it
                    for *_call, future in batch:
                        if not future.done():
                            future.set_exception(exc)
                    if isinstance(exc, asyncio.CancelledError):
                        raise
                    continue
                for (*_call, future), result in zip(batch, results, strict=True):
                    if not future.done():
                        future.set_result(result)
        finally:
            state.running -= 1

    @functools.wraps(fn)
    async def batched(*args: Any, **kwargs: Any) -> Any:
        if not thread_released():
            return await brief(*args, **kwargs)
        loop = asyncio.get_running_loop()
        state = per_loop.get(loop)
        if state is None:
            state = per_loop[loop] = _Batches()
        future: asyncio.Future[Any] = loop.create_future()
        state.pending.append((contextvars.copy_context(), args, kwargs, future))
        if state.running < BATCH_PARALLEL:
            state.running += 1
            # a context of its own: the batch outlives the request that started it
            task = loop.create_task(drain(state), context=contextvars.Context())
            state.tasks.add(task)
            task.add_done_callback(state.tasks.discard)
        ok, value = await future
        if ok:
            return value
        raise value

    return batched
