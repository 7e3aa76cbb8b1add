"""A run of consecutive ``token`` entries of a generation stream decoded as ONE event.

A token entry's data is ``{"t": "<JSON string body>"}`` (:data:`protocol.TOKEN_HEAD`,
:data:`protocol.TOKEN_TAIL`). JSON escapes each character on its own, so the bodies of
consecutive entries, concatenated, are the JSON string body of their texts joined: a
run decodes to one :class:`protocol.Event` of type ``token`` whose ``id`` is the run's
last entry id and whose ``tokens`` counts its entries. The runs come joined by Redis
(the stream hub's :data:`inference.streams_joined.JOINED_READ_LUA`) or are joined here
from XREAD's reply (:func:`events_parse_joined`); either way a follower sees the same
events.
"""

from __future__ import annotations

import json
from typing import Any

from inference.protocol import (
    EVENT_TOKEN,
    TOKEN_HEAD,
    TOKEN_TAIL,
    Event,
    event_parse_flat,
)


def event_parse_run(last_id: str, tokens: int, body: str) -> Event:
    """Decode a run of ``tokens`` consecutive token entries read joined (the stream
    hub's joined read, :data:`inference.streams_joined.JOINED_READ_LUA`): ``body`` is their
    data's JSON string bodies (between ``{"t": "`` and ``"}``) concatenated, which is
    the JSON string body of their texts concatenated (JSON escapes each character on
    its own); ``last_id`` the run's last entry id. Returns one ``token`` Event of the
    joined text, ``tokens`` set; a body with no backslash is its text as written."""
    text = body if "\\" not in body else json.loads(f'"{body}"')
    return Event(id=last_id, type=EVENT_TOKEN, data={"t": text}, tokens=tokens)


def events_parse_joined(entries: list[Any]) -> list[Event]:
    """Decode XREAD's entries of one stream (``[[id, [name, value, ...]], ...]``,
    str) as :func:`protocol.event_parse_flat` does, but each run of consecutive token entries
    whose data is ``{"t": "<JSON string body with no quote>"}`` as ONE token Event
    (:func:`event_parse_run`: the run's texts joined, its last id, ``tokens`` its
    entries): no Event or dict per token."""
    events: list[Event] = []
    parts: list[str] = []
    last = ""
    head_n, tail_n = len(TOKEN_HEAD), len(TOKEN_TAIL)
    for entry_id, fields in entries:
        if len(fields) == 4 and fields[1] == EVENT_TOKEN and fields[2] == "d":
            raw = fields[3]
            if raw.startswith(TOKEN_HEAD) and raw.endswith(TOKEN_TAIL):
                body = raw[head_n:-tail_n]
                if '"' not in body:
                    parts.append(body)
                    last = entry_id
                    continue
        if parts:
            events.append(event_parse_run(last, len(parts), "".join(parts)))
            parts = []
        events.append(event_parse_flat(entry_id, fields))
    if parts:
        events.append(event_parse_run(last, len(parts), "".join(parts)))
    return events
