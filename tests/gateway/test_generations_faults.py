"""Faults around the generation lifecycle, with real processes: a web process killed
inside a turn, and PostgreSQL restarted under running chat and API streams. What is
asserted is what a user sees (every stream ends, clearly) and what stays stored or
reserved (nothing leaks)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import threading
import time
from typing import Any

import httpx
import pytest
from asgiref.sync import SyncToAsync
from django.db import connection
from django.test import Client

from conversations import services as chat
from conversations.models import Message
from gateway import quota
from gateway import services as gateway_services
from gateway import tasks as gateway_tasks
from inference import keys
from inference.connections import redis_sync
from tests import stack
from tests.conftest import fake_heartbeat
from tests.sse import parse_frames, session_cookie
from tests.stack import ROOT, running_stack

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

# Run a chat turn in a process of its own and kill it (SIGKILL: no cleanup, no
# finally) at the named point of the lifecycle.
_TURN_AND_DIE = textwrap.dedent(
    """
    import os, signal, sys
    import django
    django.setup()
    from django.contrib.auth import get_user_model
    from conversations import services
    from conversations.services.turns import rows
    from gateway.generations import start

    def die(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGKILL)

    if sys.argv[1] == "store":  # inside the transaction that stores the turn
        rows.assistant_new = die
    else:  # committed, reserved, not yet enqueued
        start.generation_submit = die
    user = get_user_model().objects.get(username=sys.argv[2])
    services.turn_start(user=user, content="hello")
    """
)


def _reserved_tokens() -> int:
    return sum(
        int(redis_sync().hget(key, "amount") or 0)
        for key in keys.scan_iter_all(redis_sync(), keys.RESERVATION_KEY_PATTERN)
    )


@pytest.mark.parametrize("where", ["store", "submit"])
def test_a_web_process_killed_inside_a_turn_has_its_reservation_swept(
    user, settings, where
):
    fake_heartbeat()
    proc = subprocess.run(
        [sys.executable, "-c", _TURN_AND_DIE, where, user.username],
        cwd=ROOT,
        env={**stack.test_env(), "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"},
        capture_output=True,
        timeout=120,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()[-2000:]
    assert _reserved_tokens() > 0  # the dead process held a reservation
    stored = Message.objects.filter(conversation__user=user).count()
    assert stored == (0 if where == "store" else 2)  # rolled back / committed

    settings.GATEWAY_RESERVATION_SUBMIT_TIMEOUT_S = 60
    assert gateway_tasks.sweep_quota_reservations() == 0  # too young to be swept
    settings.GATEWAY_RESERVATION_SUBMIT_TIMEOUT_S = 0
    assert gateway_tasks.sweep_quota_reservations() == 1
    assert _reserved_tokens() == 0
    limits = quota.Limits(per_minute=10**6)
    assert all(w.used == 0 for w in quota.quota_windows(user_id=user.pk, limits=limits))


def _embedded() -> Any:
    """scripts/services.py, in the tests' profile (CHATSITE_SERVICES=test, set by the
    test settings): its PostgreSQL is the tests' own, never `make run`'s."""
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import services as embedded
    finally:
        sys.path.pop(0)
    assert embedded.PROFILE == "test", embedded.PROFILE
    return embedded


def _pg_restart() -> None:
    """Restart the tests' embedded PostgreSQL (scripts/services.py) as an operator
    would."""
    embedded = _embedded()
    embedded.pg_down()
    embedded.pg_up()


def _embedded_pg() -> bool:
    port_file = _embedded().PG_DIR / "port"
    return (
        port_file.exists()
        and str(connection.settings_dict["PORT"]) == port_file.read_text().strip()
    )


def _chat_stream(base: str, cookie: str, url: str, out: dict, key: str) -> None:
    buffer, events = "", []
    try:
        with httpx.stream(
            "GET", base + url, headers={"Cookie": cookie}, timeout=60
        ) as response:
            for chunk in response.iter_text():
                buffer += chunk
                new, _comments, buffer = parse_frames(buffer)
                events.extend(new)
                if any(e.event in ("done", "error") for e in new):
                    break
        out[key] = events[-1].event if events else "nothing"
    except httpx.HTTPError as exc:
        out[key] = f"dropped: {exc!r}"


def _api_stream(base: str, api_key: str, out: dict, key: str) -> None:
    last = None
    try:
        with httpx.stream(
            "POST",
            base + "/v1/chat/completions",
            headers={"Authorization": f"Bearer {api_key}"},
            json={
                "model": "default",
                "stream": True,
                "messages": [{"role": "user", "content": "Tell me a story."}],
            },
            timeout=60,
        ) as response:
            for line in response.iter_lines():
                if line.startswith("data: "):
                    last = line[len("data: ") :]
        if last == "[DONE]":
            out[key] = "done"
        elif last and "error" in json.loads(last):
            out[key] = "error"
        else:
            out[key] = f"ended without an end: {last!r}"
    except httpx.HTTPError as exc:
        out[key] = f"dropped: {exc!r}"


def test_postgresql_restarted_under_running_streams_ends_each_clearly_and_leaks_nothing(
    user,
):
    """5 chat and 5 API streams run while PostgreSQL restarts: each ends with ``done``
    or a clear error (none hangs, none drops), every answer is final afterwards and
    no token reservation stays held."""
    if not _embedded_pg():
        pytest.skip("needs the embedded PostgreSQL of `make test` to restart")
    api_key = gateway_services.api_key_create(user=user)[1]
    client = Client()
    client.force_login(user)
    cookie = session_cookie(client)
    worker = ["--pool", "default", "--engine", "scripted", "--delay-ms", "40"]
    worker += ["--script-text", " ".join(["word"] * 120), "--concurrency", "16"]
    with running_stack(worker) as base:
        turns = [chat.turn_start(user=user, content=f"Story {i}") for i in range(5)]
        out: dict[str, str] = {}
        threads = [
            threading.Thread(
                target=_chat_stream,
                args=(
                    base,
                    cookie,
                    f"/c/{t.conversation.id}/messages/{t.assistant_message.id}/stream/",
                    out,
                    f"chat{i}",
                ),
            )
            for i, t in enumerate(turns)
        ] + [
            threading.Thread(target=_api_stream, args=(base, api_key, out, f"api{i}"))
            for i in range(5)
        ]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 30
        while (
            len(list(keys.scan_iter_all(redis_sync(), keys.GEN_KEY_PATTERN))) < 10
        ):  # all streaming
            assert time.monotonic() < deadline, "the streams did not start"
            time.sleep(0.05)
        connection.close()
        _pg_restart()
        for thread in threads:
            thread.join(timeout=90)
        assert not any(t.is_alive() for t in threads), f"a stream hung: {out}"
        connection.close()
        # The thread async tests' sync_to_async steps share (asgiref's single-thread
        # executor) holds a connection PostgreSQL just terminated; without this the
        # next async test to touch the database fails on it.
        SyncToAsync.single_thread_executor.submit(lambda: connection.close()).result()
        if getattr(connection, "pool", None) is not None:
            connection.pool.check()
        assert sorted(out) == sorted(
            [f"chat{i}" for i in range(5)] + [f"api{i}" for i in range(5)]
        )
        assert all(v in ("done", "error") for v in out.values()), out
        deadline = time.monotonic() + 30
        while (
            _reserved_tokens()
            or Message.objects.filter(status=Message.Status.STREAMING).exists()
        ):
            assert time.monotonic() < deadline, "a reservation or an answer was left"
            chat.streaming_messages_reap(older_than_s=0)
            time.sleep(0.2)
