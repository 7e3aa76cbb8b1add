"""A generation's events read whole, for settlement (:func:`generation_events_many`):
one pipelined round trip for many streams, each stream's reply taken raw and its
payloads decoded at once. :func:`inference.client.generation_events` is one of them.
"""

from __future__ import annotations

import json
from typing import Any

from inference import keys, protocol
from inference.connections import redis_sync

# XRANGE of the whole stream, its reply as Redis sends it: redis-py's XRANGE reply
# parser builds a dict per entry, the larger part of a settlement's read
_XRANGE_RAW_LUA = "return redis.call('XRANGE', KEYS[1], '-', '+')"


def generation_events_many(*, job_ids: list[str]) -> list[list[protocol.Event]]:
    """:func:`inference.client.generation_events` of many generations, in order, in one pipelined
    round trip (on a cluster, grouped per node by the pipeline)."""
    with redis_sync().pipeline(transaction=False) as pipe:
        for job_id in job_ids:
            keys.eval_on(pipe, _XRANGE_RAW_LUA, 1, keys.gen_key(job_id))
        return [_until_terminal(entries) for entries in pipe.execute()]


def _until_terminal(entries: list[list[Any]]) -> list[protocol.Event]:
    """The events of a raw XRANGE reply (``[[id, [name, value, ...]], ...]``) up to
    and including the first terminal one.

    When every entry is ours (``e``, ``d``, in that order: :func:`protocol.event_fields`)
    the payloads are decoded by one ``json.loads`` of them all as one array: an
    answer's hundreds of small token payloads cost little more than one (a call per
    payload spent most of its time on the call). Otherwise each entry is decoded by
    :func:`protocol.event_parse_flat`.
    """
    if all(
        type(i) is str and len(f) == 4 and f[0] == "e" and f[2] == "d"
        for i, f in entries
    ):
        end = next(
            (
                k + 1
                for k, (_i, f) in enumerate(entries)
                if f[1] in protocol.TERMINAL_EVENTS
            ),
            len(entries),
        )
        read = entries[:end]
        try:
            payloads = json.loads("[" + ",".join(f[3] for _i, f in read) + "]")
        except (TypeError, ValueError):
            payloads = None
        if isinstance(payloads, list) and len(payloads) == len(read):
            return [
                protocol.Event(id=i, type=f[1], data=data)
                for (i, f), data in zip(read, payloads, strict=True)
            ]
    events: list[protocol.Event] = []
    for entry_id, fields in entries:
        event = protocol.event_parse_flat(entry_id, fields)
        events.append(event)
        if event.is_terminal:
            break
    return events
