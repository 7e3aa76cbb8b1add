"""The Redis commands that must work on a cluster, for every key of
:mod:`inference.keys`.

A DEL, UNLINK or EXISTS of keys in several slots is split per slot by redis-py's
cluster client (not atomic): it is used only for clean-ups. MGET goes through
:func:`mget_all`, a pattern SCAN through :func:`scan_iter_all`, an EVAL that may be
pipelined through :func:`eval_on`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


def eval_on(client: Any, script: str, numkeys: int, *keys_and_args: Any) -> Any:
    """Run (client) or queue (pipeline) ``EVAL script numkeys *keys_and_args``.

    Works on a plain or cluster client or pipeline, sync or async: redis-py's cluster
    pipeline has no ``eval()`` but routes the raw command by its KEYS (which must be
    in one slot).
    """
    return client.execute_command("EVAL", script, numkeys, *keys_and_args)


def scan_iter_all(client: Any, match: str, **kwargs: Any) -> Iterator[Any]:
    """Yield every key matching ``match`` (a SCAN pattern) on every master.

    ``kwargs`` go to redis-py's ``scan_iter`` (``count``, ``_type``). Every pattern
    SCAN of the product goes through here.
    """
    return iter(client.scan_iter(match=match, **kwargs))


def mget_all(client: Any, keys: list[str]) -> Any:
    """Return the values of ``keys`` (None where absent), in order, whatever their slots.

    A cluster client's ``mget_nonatomic`` splits the read per slot; a single node's
    MGET is one command. Works with a sync or an async client (then awaitable).
    """
    mget = getattr(client, "mget_nonatomic", None) or client.mget
    return mget(keys)
