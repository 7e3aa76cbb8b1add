"""Scale-out on one machine as on many (issue 13): two daphne processes behind HAProxy
(deploy/haproxy.cfg, rendered for loopback ports), one scripted inference worker.

A stream started through one web process continues through the other when the first
is killed with SIGKILL: the client reconnects through the proxy with Last-Event-ID
(as EventSource does) and gets the rest; no sticky sessions.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest

from chatsite.asgi import application
from conversations.models import Message
from scripts.haproxy_config import haproxy_config_render
from tests.proxy import HAPROXY, Proxy, haproxy_process
from tests.sse import SseEvent, parse_frames
from tests.stack import Web, stack_env, web_process, worker_processes

needs_haproxy = pytest.mark.skipif(
    HAPROXY is None, reason="haproxy is not installed (make test installs it as root)"
)
WORDS = 200  # the answer: 200 tokens, 20 ms apart (4 s)
ANSWER = " ".join(f"w{i}" for i in range(WORDS))


def test_the_shipped_haproxy_config_renders_to_a_valid_configuration(tmp_path):
    if HAPROXY is None:
        pytest.skip("haproxy is not installed (make test installs it as root)")
    path = tmp_path / "haproxy.cfg"
    path.write_text(
        haproxy_config_render(
            listen=":80",
            stats_listen="127.0.0.1:8404",
            backends=["127.0.0.1:8001", "127.0.0.1:8002"],
        )
    )
    text = path.read_text()
    assert "{{" not in text
    assert "server web1 127.0.0.1:8001" in text and "server web2 127.0.0.1:8002" in text
    check = subprocess.run(
        [HAPROXY, "-c", "-f", str(path)], capture_output=True, text=True
    )
    assert check.returncode == 0, check.stdout + check.stderr


def test_rendering_without_a_web_process_is_refused():
    with pytest.raises(ValueError, match="at least one web process"):
        haproxy_config_render(listen=":80", stats_listen=":8404", backends=[])


async def test_healthz_answers_without_host_header_session_or_database():
    sent: list[dict] = []

    async def receive() -> dict:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "method": "GET",
        "path": "/healthz",
        "raw_path": b"/healthz",
        "query_string": b"",
        "headers": [],  # no Host: HAProxy's check names none of ALLOWED_HOSTS
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
    }
    await application(scope, receive, send)  # no django_db mark: a query would fail
    assert sent[0]["status"] == 200
    assert sent[1]["body"] == b"ok\n"


@dataclass
class Farm:
    """Two daphnes behind HAProxy, by HAProxy server name, and the proxy."""

    webs: dict[str, Web]
    proxy: Proxy


@pytest.fixture
def farm(user) -> Iterator[Farm]:
    env = stack_env({"CHAT_MAX_TOKENS": str(WORDS)})
    worker = ["--pool", "default", "--engine", "scripted", "--delay-ms", "20"]
    worker += ["--script-text", ANSWER]
    daphne_args = ["--proxy-headers"]  # as deploy/systemd/chatsite-web@.service
    with (
        worker_processes([worker], env),
        web_process(env, daphne_args=daphne_args) as web1,
        web_process(env, daphne_args=daphne_args) as web2,
        haproxy_process([web1.base[7:], web2.base[7:]]) as proxy,
    ):
        yield Farm(webs={"web1": web1, "web2": web2}, proxy=proxy)


def _login(client: httpx.Client) -> None:
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


def _ended(events: list[SseEvent]) -> bool:
    return any(e.event in ("done", "error") for e in events)


def _serving(proxy: Proxy) -> str:
    """The one server with an open session: the daphne relaying our stream."""
    servers = proxy.wait(
        lambda s: sum(int(row["scur"]) > 0 for row in s.values()) == 1, timeout_s=10
    )
    (name,) = [name for name, row in servers.items() if int(row["scur"]) > 0]
    return name


@needs_haproxy
@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_stream_continues_through_the_other_web_process_when_the_first_is_killed(
    farm,
):
    base = farm.proxy.base
    with httpx.Client(base_url=base, timeout=30) as browser:
        _login(browser)
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
            assert some_tokens(events) and not _ended(events)
            first = _serving(farm.proxy)
            killed = farm.webs[first].process.popen
            killed.kill()  # SIGKILL: no finally, no detach, no goodbye
            killed.wait(timeout=10)
            with pytest.raises(httpx.HTTPError):
                reader.until(_ended)
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
                    SseReader(stream, events).until(_ended)
                    resumed = stream
                    break
            except httpx.HTTPError:
                continue
        assert resumed is not None, "the stream did not resume through the proxy"
    assert _ended(events) and events[-1].event == "done", events[-1]
    assert len(events) > before
    ids = [tuple(map(int, e.id.split("-"))) for e in events if e.id]
    assert ids == sorted(ids) and len(ids) == len(set(ids))  # no frame twice
    assembled = "".join(e.data["t"] for e in events if e.event == "token")
    assert assembled == ANSWER
    stored = Message.objects.get(id=answer["id"])
    assert stored.status == Message.Status.COMPLETE
    assert stored.content == assembled
    # The proxy has taken the dead process out of rotation; the other one serves.
    servers = farm.proxy.wait(lambda s: s[first]["status"].startswith("DOWN"), 10)
    (other,) = set(servers) - {first}
    assert servers[other]["status"] == "UP"
    assert httpx.get(base + "/login/", timeout=10).status_code == 200


@needs_haproxy
@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_behind_the_proxy_metrics_are_refused_and_a_forged_client_address_is_ignored(
    farm,
):
    base = farm.proxy.base
    # /metrics trusts loopback addresses, and every proxied request comes from one.
    assert httpx.get(base + "/metrics", timeout=10).status_code == 403
    direct = farm.webs["web1"].base
    assert httpx.get(direct + "/metrics", timeout=10).status_code == 200
    # The per-IP login limit (LOGIN_RATE, 10/m) counts the proxy's view of the client:
    # a client that sends a new X-Forwarded-For each time gets no fresh budget. (21
    # tries: the limit's window may restart once while they run.)
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
    assert statuses[0] == 200 and 429 in statuses, statuses
