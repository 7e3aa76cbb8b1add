"""The scale-out drill, run through each shipped proxy (tests/test_scaleout.py for
HAProxy, tests/test_scaleout_nginx.py for nginx): two web processes behind the proxy, one
scripted inference worker; the one relaying a stream is killed with SIGKILL and
the client reconnects through the proxy with Last-Event-ID, as EventSource does.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx
import pytest

from conversations.models import Message
from tests.sse import SseEvent, parse_frames
from tests.stack import Web

WORDS = 200  # the answer: 200 tokens, 20 ms apart (4 s)
ANSWER = " ".join(f"w{i}" for i in range(WORDS))
# The scripted worker of the drill (tests.stack.worker_processes arguments).
WORKER = ["--pool", "default", "--engine", "scripted", "--delay-ms", "20"]
WORKER += ["--script-text", ANSWER]
# as deploy/systemd/chatsite-web@.service
SERVER_ARGS = ["--proxy-headers", "--forwarded-allow-ips", "127.0.0.1"]


def login(client: httpx.Client) -> None:
    """Sign ``client`` in as the ``user`` fixture (alice)."""
    client.get("/login/")
    response = client.post(
        "/login/",
        data={
            "username": "alice",
            "password": "pw-alice-123",
            "csrfmiddlewaretoken": client.cookies["csrftoken"],
        },
    )
    assert response.status_code == 302, response.text


class SseReader:
    """Frames of one streamed response, read on demand (httpx iterates a body once)."""

    def __init__(self, stream: httpx.Response, events: list[SseEvent]) -> None:
        self.chunks = stream.iter_text()
        self.events = events
        self.buffer = ""

    def until(self, predicate) -> None:
        """Append complete frames to ``events`` until ``predicate(events)`` or the
        stream ends; a connection cut mid-stream raises httpx.HTTPError."""
        for chunk in self.chunks:
            self.buffer += chunk
            new, _comments, self.buffer = parse_frames(self.buffer)
            self.events.extend(new)
            if predicate(self.events):
                return


def ended(events: list[SseEvent]) -> bool:
    """True once a terminal frame (done or error) arrived."""
    return any(e.event in ("done", "error") for e in events)


def kill_drill(
    *, base: str, webs: dict[str, Web], serving: Callable[[httpx.Response], str]
) -> str:
    """Run the drill through the proxy at ``base``; return the killed web's name.

    ``serving(stream_response)`` names (a key of ``webs``) the web process that relays the
    open stream. Asserts that the stream was cut, resumed through the proxy without a
    frame lost or repeated, and that the stored answer equals what the client
    assembled.
    """
    with httpx.Client(base_url=base, timeout=30) as browser:
        login(browser)
        turn = browser.post(
            "/c/messages/",
            data={"content": "Count for me."},
            headers={"X-CSRFToken": browser.cookies["csrftoken"]},
        )
        assert turn.status_code == 201, turn.text
        answer = turn.json()["assistant_message"]
        events: list[SseEvent] = []

        def some_tokens(evs: list[SseEvent]) -> bool:
            return sum(e.event == "token" for e in evs) >= 5

        with browser.stream("GET", answer["stream_url"]) as stream:
            assert stream.status_code == 200
            assert stream.headers["content-type"] == "text/event-stream"
            reader = SseReader(stream, events)
            reader.until(some_tokens)
            assert some_tokens(events) and not ended(events)
            first = serving(stream)
            killed = webs[first].process.popen
            killed.kill()  # SIGKILL: no finally, no detach, no goodbye
            killed.wait(timeout=10)
            with pytest.raises(httpx.HTTPError):
                reader.until(ended)
        before = len(events)
        assert 0 < sum(e.event == "token" for e in events) < WORDS
        # EventSource: reconnect after `retry` (1 s) with the last frame's id.
        resumed = None
        for _attempt in range(10):
            time.sleep(1.0)
            last_id = [e.id for e in events if e.id][-1]
            try:
                with browser.stream(
                    "GET", answer["stream_url"], headers={"Last-Event-ID": last_id}
                ) as stream:
                    if stream.status_code != 200:
                        continue
                    SseReader(stream, events).until(ended)
                    resumed = stream
                    break
            except httpx.HTTPError:
                continue
        assert resumed is not None, "the stream did not resume through the proxy"
    assert ended(events) and events[-1].event == "done", events[-1]
    assert len(events) > before
    ids = [tuple(map(int, e.id.split("-"))) for e in events if e.id]
    assert ids == sorted(ids) and len(ids) == len(set(ids))  # no frame twice
    assembled = "".join(e.data["t"] for e in events if e.event == "token")
    assert assembled == ANSWER
    stored = Message.objects.get(id=answer["id"])
    assert stored.status == Message.Status.COMPLETE
    assert stored.content == assembled
    return first


def login_limit_statuses(base: str) -> list[int]:
    """POST 21 wrong passwords through the proxy, each with a new forged
    X-Forwarded-For; return the statuses (21: the limit's window may restart once)."""
    statuses = []
    with httpx.Client(base_url=base, timeout=30) as client:
        client.get("/login/")
        for n in range(21):
            response = client.post(
                "/login/",
                data={
                    "username": "alice",
                    "password": "wrong",
                    "csrfmiddlewaretoken": client.cookies["csrftoken"],
                },
                headers={"X-Forwarded-For": f"198.51.100.{n}"},
            )
            statuses.append(response.status_code)
    return statuses
