"""Run one sequence of Redis commands from sync or async code, written once.

A request that both sync callers (Celery tasks, commands, request threads) and the
event loop make is written as a generator of steps (:data:`Steps`): each step is a
function of a Redis client that sends commands, and the client's reply is sent back
into the generator. :func:`steps_run` runs it on a sync client, :func:`asteps_run` on
an async one (awaiting each reply), so the logic between the commands exists once.
An exception a step raises (a cancellation too) is thrown back into the generator at
that step, so its ``except``/``finally`` blocks can send clean-up commands.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Generator
from typing import Any, TypeVar

T = TypeVar("T")

# One step: a function of a client (its result, awaited by the async runner, is the
# reply) and whether the async runner shields it from a cancellation (clean-up that
# must reach Redis although the caller left).
Step = tuple[Callable[[Any], Any], bool]
Steps = Generator[Step, Any, T]


def pipelined(client: Any, fill: Callable[[Any], Any]) -> Any:
    """Queue ``fill(pipe)``'s commands on a non-transactional pipeline of ``client``
    and send them in one round trip (sync: the replies; async: an awaitable of them)."""
    pipe = client.pipeline(transaction=False)
    fill(pipe)
    return pipe.execute()


def _advance(steps: Steps[T], reply: Any, error: BaseException | None) -> Any:
    """Send ``reply`` (or throw ``error``) into ``steps``; return its next step, or
    raise :class:`_Done` with what it returned."""
    try:
        return steps.throw(error) if error else steps.send(reply)
    except StopIteration as stop:
        raise _Done(stop.value) from None


class _Done(Exception):
    """The steps ended; ``value`` is what they returned."""

    def __init__(self, value: Any) -> None:
        self.value = value


def steps_run(steps: Steps[T], client: Any) -> T:
    """Run ``steps`` on a sync ``client``; return what the generator returns."""
    reply, error = None, None
    try:
        while True:
            step, _shielded = _advance(steps, reply, error)
            try:
                reply, error = step(client), None
            except BaseException as exc:
                reply, error = None, exc
    except _Done as done:
        return done.value


async def asteps_run(steps: Steps[T], client: Any) -> T:
    """Run ``steps`` on an async ``client`` (:func:`steps_run` on the event loop; a
    step that asks is shielded from a cancellation)."""
    reply, error = None, None
    try:
        while True:
            step, shielded = _advance(steps, reply, error)
            try:
                pending = step(client)
                reply = await (asyncio.shield(pending) if shielded else pending)
                error = None
            except BaseException as exc:
                reply, error = None, exc
    except _Done as done:
        return done.value
