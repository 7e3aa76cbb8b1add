"""Scale-out on one machine as on many (issue 13): two web processes (uvicorn) behind HAProxy
(deploy/haproxy.cfg, rendered for loopback ports), one scripted inference worker.

A stream started through one web process continues through the other when the first
is killed with SIGKILL: the client reconnects through the proxy with Last-Event-ID
(as EventSource does) and gets the rest; no sticky sessions. The drill itself is
tests/scaleout.py, run through nginx as well by tests/test_scaleout_nginx.py.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest

from chatsite.asgi import application
from scripts.haproxy_config import haproxy_config_render
from tests.proxy import HAPROXY, Proxy, haproxy_process
from tests.scaleout import (
    SERVER_ARGS,
    WORDS,
    WORKER,
    kill_drill,
    login_limit_statuses,
)
from tests.stack import Web, stack_env, web_process, worker_processes

needs_haproxy = pytest.mark.skipif(
    HAPROXY is None, reason="haproxy is not installed (make test installs it as root)"
)


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
    """Two web processes behind HAProxy, by HAProxy server name, and the proxy."""

    webs: dict[str, Web]
    proxy: Proxy


@pytest.fixture
def farm(user) -> Iterator[Farm]:
    env = stack_env({"CHAT_MAX_TOKENS": str(WORDS)})
    with (
        worker_processes([WORKER], env),
        web_process(env, server_args=SERVER_ARGS) as web1,
        web_process(env, server_args=SERVER_ARGS) as web2,
        haproxy_process([web1.base[7:], web2.base[7:]]) as proxy,
    ):
        yield Farm(webs={"web1": web1, "web2": web2}, proxy=proxy)


def _serving(proxy: Proxy) -> str:
    """The one server with an open session: the web process relaying our stream."""
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
    first = kill_drill(
        base=farm.proxy.base,
        webs=farm.webs,
        serving=lambda _stream: _serving(farm.proxy),
    )
    # The proxy has taken the dead process out of rotation; the other one serves.
    servers = farm.proxy.wait(lambda s: s[first]["status"].startswith("DOWN"), 10)
    (other,) = set(servers) - {first}
    assert servers[other]["status"] == "UP"
    assert httpx.get(farm.proxy.base + "/login/", timeout=10).status_code == 200


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
    # a client that sends a new X-Forwarded-For each time gets no fresh budget.
    statuses = login_limit_statuses(base)
    assert statuses[0] == 200 and 429 in statuses, statuses
