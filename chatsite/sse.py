"""The text of a Server-Sent Events frame (the WHATWG ``text/event-stream`` format).

Every SSE frame the site writes is built here: the chat's relay
(:mod:`conversations.sse`) and the ``error`` frame of :func:`chatsite.errors.error_sse`.
What each event carries is stated elsewhere: :mod:`conversations.events` for the
browser's events, :mod:`inference.protocol` for the worker's.
"""

from __future__ import annotations

import json
from typing import Any

# One encoder for every frame: json.dumps(..., ensure_ascii=False) builds a new
# JSONEncoder per call, a measurable share of a frame's cost at thousands of frames a
# second.
_JSON = json.JSONEncoder(ensure_ascii=False)

# Encode one value as single-line JSON, non-ASCII kept as is (a frame's ``data:``).
frame_json = _JSON.encode


def sse_frame(event: str, data: dict[str, Any], event_id: str | None = None) -> str:
    """Return one SSE frame: ``id:`` (when ``event_id`` is given), ``event:`` and
    ``data:`` (``data`` as single-line JSON), ended by a blank line."""
    head = f"id: {event_id}\n" if event_id else ""
    return f"{head}event: {event}\ndata: {frame_json(data)}\n\n"
