"""The chat page's calls as a benchmark makes them over HTTP (httpx): sign in, then
send a message and read the answer's stream.

For the raw-socket client that measures our path to the millisecond, see
:mod:`bench.sse_wire`.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

NEW_CONVERSATION = "/c/messages/"  # a POST here starts a conversation


def login_form(cookies: Any, *, username: str, password: str) -> dict[str, str]:
    """Return the login form's fields for ``username``, with the CSRF token of
    ``cookies`` (the client's cookie jar after a GET of ``/login/``)."""
    return {
        "username": username,
        "password": password,
        "csrfmiddlewaretoken": cookies["csrftoken"],
    }


def login(http: Any, *, username: str, password: str) -> None:
    """Sign ``http`` (an ``httpx.Client`` on the web's base URL) in, as a person
    would: GET and POST the login form. Raises RuntimeError unless it redirects."""
    http.get("/login/")
    response = http.post(
        "/login/", data=login_form(http.cookies, username=username, password=password)
    )
    if response.status_code != 302:
        raise RuntimeError(f"login: {response.status_code} {response.text[:300]}")


@dataclass
class TurnRead:
    """What one turn gave the client: the POST's JSON (``body``), the monotonic times
    (s) the POST was sent and answered, of the first ``token`` frame and of the last
    frame (None when the stream had none), the last frame's event (``done``,
    ``error``; "" when the stream ended without one) and the ``meta`` frame's data."""

    body: dict[str, Any]
    sent: float
    posted: float
    first_token: float | None
    ended: float | None
    end: str
    meta: dict[str, Any] | None

    @property
    def ttft_ms(self) -> float:
        """POST sent -> first token frame read, ms (NaN without a token)."""
        if self.first_token is None:
            return float("nan")
        return (self.first_token - self.sent) * 1000


def turn_read(http: Any, content: str, *, url: str = NEW_CONVERSATION) -> TurnRead:
    """POST ``content`` to ``url`` as the chat page does (CSRF header), then GET the
    answer's stream and read it to its ``done`` or ``error`` frame.

    ``http`` is a signed-in ``httpx.Client``. Raises RuntimeError when the POST is not
    answered 201.
    """
    headers = {"X-CSRFToken": http.cookies["csrftoken"]}
    sent = time.monotonic()
    response = http.post(url, data={"content": content}, headers=headers)
    posted = time.monotonic()
    if response.status_code != 201:
        raise RuntimeError(f"POST {url}: {response.status_code} {response.text[:300]}")
    body = response.json()
    first = ended = meta = None
    end = ""
    with http.stream("GET", body["assistant_message"]["stream_url"]) as stream:
        for event in _sse_events(stream):
            if event.event == "token" and first is None:
                first = time.monotonic()
            elif event.event == "meta" and meta is None:
                meta = event.data
            elif event.event in ("done", "error"):
                end, ended = event.event, time.monotonic()
                break
    return TurnRead(body, sent, posted, first, ended, end, meta)


def _sse_events(stream: Any) -> Iterator[Any]:
    """Yield the events (:class:`tests.sse.SseEvent`) of an open httpx streaming
    response as its chunks arrive; comments are skipped."""
    from tests.sse import parse_frames

    buffer = ""
    for chunk in stream.iter_text():
        buffer += chunk
        events, _, buffer = parse_frames(buffer)
        yield from events
