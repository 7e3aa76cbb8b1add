"""Scale-out through nginx (issue 13): the drill of tests/test_scaleout.py (two
web processes, one killed with SIGKILL mid-stream, the client resumes with Last-Event-ID)
through deploy/nginx.conf rendered for loopback ports and run as the current user.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest

from scripts.nginx_config import nginx_config_render
from tests.proxy import NGINX, Nginx, nginx_argv, nginx_process, nginx_render_private
from tests.scaleout import (
    SERVER_ARGS,
    WORDS,
    WORKER,
    kill_drill,
    login_limit_statuses,
)
from tests.stack import Web, stack_env, web_process, worker_processes

needs_nginx = pytest.mark.skipif(
    NGINX is None, reason="nginx is not installed (make test installs it as root)"
)
# Added to the proxied location for the drill only: which web process relays a response.
# The shipped file does not reveal its backends' addresses to clients.
UPSTREAM_HEADER = "X-Test-Upstream"


@needs_nginx
def test_the_shipped_nginx_config_renders_to_a_valid_configuration(tmp_path):
    path = nginx_render_private(
        listen="127.0.0.1:8080",
        backends=["127.0.0.1:8001", "127.0.0.1:8002"],
        folder=tmp_path,
    )
    text = path.read_text()
    assert "{{" not in text
    assert "server 127.0.0.1:8001 max_fails=1" in text
    assert "server 127.0.0.1:8002 max_fails=1" in text
    check = subprocess.run(nginx_argv(path, "-t"), capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr


def test_the_nginx_config_streams_unbuffered_without_stickiness_and_refuses_metrics():
    text = nginx_config_render(listen="80", backends=["10.0.0.1:8001"])
    directives = {
        line.strip() for line in text.splitlines() if not line.strip().startswith("#")
    }
    for needed in (
        "proxy_buffering off;",
        "proxy_http_version 1.1;",
        'proxy_set_header Connection "";',
        "keepalive 32;",
        "proxy_read_timeout 600s;",
        "proxy_next_upstream error timeout;",
        "proxy_set_header X-Forwarded-For $remote_addr;",
        "location ^~ /metrics {",
        "return 403;",
        "user www-data;",
    ):
        assert needed in directives, needed
    body = "\n".join(directives)
    for sticky in ("ip_hash", "hash ", "sticky", "proxy_ignore_headers"):
        assert sticky not in body, sticky


def test_rendering_without_a_web_process_is_refused():
    with pytest.raises(ValueError, match="at least one web process"):
        nginx_config_render(listen="80", backends=[])


@dataclass
class NginxFarm:
    """Two web processes behind nginx, by address (``host:port``), and the proxy."""

    webs: dict[str, Web]
    proxy: Nginx


@pytest.fixture
def nginx_farm(user) -> Iterator[NginxFarm]:
    env = stack_env({"CHAT_MAX_TOKENS": str(WORDS)})
    with (
        worker_processes([WORKER], env),
        web_process(env, server_args=SERVER_ARGS) as web1,
        web_process(env, server_args=SERVER_ARGS) as web2,
    ):
        webs = {web1.base[7:]: web1, web2.base[7:]: web2}
        extra = f"add_header {UPSTREAM_HEADER} $upstream_addr always;"
        with nginx_process(list(webs), extra=extra) as proxy:
            yield NginxFarm(webs=webs, proxy=proxy)


@needs_nginx
@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_through_nginx_a_stream_continues_on_the_other_web_process_when_one_is_killed(
    nginx_farm,
):
    farm = nginx_farm
    killed = kill_drill(
        base=farm.proxy.base,
        webs=farm.webs,
        serving=lambda stream: stream.headers[UPSTREAM_HEADER],
    )
    # Passive failover: requests keep working, each served by the survivor (a try on
    # the dead one is refused and passed to the next server within the request).
    (survivor,) = set(farm.webs) - {killed}
    for _ in range(4):
        response = httpx.get(farm.proxy.base + "/login/", timeout=10)
        assert response.status_code == 200
        assert response.headers[UPSTREAM_HEADER].split(", ")[-1] == survivor


@needs_nginx
@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_behind_nginx_metrics_are_refused_and_a_forged_client_address_is_ignored(
    nginx_farm,
):
    base = nginx_farm.proxy.base
    assert httpx.get(base + "/metrics", timeout=10).status_code == 403
    assert httpx.get(base + "/metrics/", timeout=10).status_code == 403
    direct = next(iter(nginx_farm.webs.values())).base
    assert httpx.get(direct + "/metrics", timeout=10).status_code == 200
    statuses = login_limit_statuses(base)
    assert statuses[0] == 200 and 429 in statuses, statuses
