"""The web process loads at start what a turn needs (chatsite.warmup), so the first
turn of a fresh process is not slower than a warm one (issue 13: within 2x)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests import stack
from tests.stack import ROOT, free_port

PROBE = """
import json
import chatsite.asgi
from django.urls import get_resolver
from inference.tokens import prompt_counter
from safety.classifiers.embedded import embedded_model
print(json.dumps({
    "reverse_built": bool(get_resolver()._populated),
    "tokenizer": prompt_counter.cache_info().currsize,
    "classifier": embedded_model.cache_info().currsize,
}))
"""


def _warmed(probe: str = PROBE, **env: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=ROOT,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "chatsite.settings.test", **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_importing_the_asgi_app_loads_the_tokenizer_urls_and_classifier():
    """What the web process imports has, before any request, the tokenizer, the URLconf's
    reverse tables and (moderation on) the input classifier loaded."""
    warmed = _warmed(SAFETY_INPUT_ENABLED="1", MEMORY_TOKENIZER_ENGINE="scripted")
    assert warmed == {"reverse_built": True, "tokenizer": 1, "classifier": 1}


CACHE_PROBE = """
import asyncio, json
from asgiref.sync import sync_to_async
import chatsite.asgi
from django.conf import settings
from django.core.cache import caches

def aliases():
    return [caches[alias] for alias in settings.CACHES]

async def request():  # each request runs in a task of its own, as under uvicorn
    return await sync_to_async(aliases, thread_sensitive=False)()

async def main():
    first = await asyncio.create_task(request())
    second = await asyncio.create_task(request())
    return [a is b for a, b in zip(first, second)] + [len(first)]

print(json.dumps(asyncio.run(main())))
"""


def test_every_request_uses_the_process_s_cache_objects():
    """Two requests (two tasks, each in a sync thread) get the same cache object of
    each alias: one Redis pool per process, not a new connection per request."""
    assert _warmed(CACHE_PROBE) == [True, True, 2]


def test_with_output_moderation_alone_on_the_classifier_is_loaded_too():
    warmed = _warmed(
        SAFETY_INPUT_ENABLED="0",
        SAFETY_OUTPUT_ENABLED="1",
        MEMORY_TOKENIZER_ENGINE="scripted",
    )
    assert warmed["classifier"] == 1


def test_with_moderation_off_the_classifier_is_not_loaded():
    warmed = _warmed(
        SAFETY_INPUT_ENABLED="0",
        SAFETY_OUTPUT_ENABLED="0",
        MEMORY_TOKENIZER_ENGINE="scripted",
    )
    assert warmed["classifier"] == 0 and warmed["reverse_built"]


SERVICES_PROBE = """
import json, re, threading
from unittest import mock
import chatsite.asgi
from django.db import connection
from django.urls import reverse
from gateway import selectors
from inference.connections import redis_sync
for thread in threading.enumerate():
    if thread.name == "services-warm":
        thread.join(60)
pool = connection.pool.get_stats() if connection.pool._opened else {}
ids = {"conversation_id": "6a97a1ef-c9eb-4984-9bc0-0578fac0ef59",
       "message_id": "31c232a9-2ddb-470c-8aa0-0072435c8a07"}
compiled = []
real = re._compiler.compile
def counting(*args, **kwargs):
    compiled.append(args[0])
    return real(*args, **kwargs)
with mock.patch("re._compiler.compile", counting):  # only on a cache miss
    for name in ("message-stream", "message-stop", "conversation-detail"):
        reverse(name, kwargs=ids if name != "conversation-detail" else
                {"conversation_id": ids["conversation_id"]})
print(json.dumps({
    "config": selectors._config is not None,
    "pooled_idle": pool.get("pool_available", 0),
    "redis_idle": len(redis_sync().connection_pool._connections),
    "compiled": compiled,
}))
"""


def test_a_fresh_web_process_opens_its_connections_and_builds_url_regexes(
    django_db_setup,
):
    """Before any request: the gateway's config snapshot is loaded, a pooled database
    connection and a Redis connection wait idle (the warm-up returned them), and the
    URLs a turn names need no regex compiled."""
    warmed = _warmed(SERVICES_PROBE, **stack.test_env(), WEB_WARM_SERVICES="1")
    assert warmed["config"] is True
    assert warmed["pooled_idle"] >= 1
    assert warmed["redis_idle"] >= 1
    assert warmed["compiled"] == []


def test_a_web_process_starts_while_the_database_is_down(django_db_setup):
    """The warm-up runs beside start-up: with PostgreSQL unreachable the app still
    imports, and the warm-up gives up without an error (the first request reports it)."""
    env = stack.test_env()
    env["DATABASE_URL"] = f"postgres://postgres@127.0.0.1:{free_port()}/none"
    warmed = _warmed(
        SERVICES_PROBE, **env, WEB_WARM_SERVICES="1", DATABASE_POOL_TIMEOUT_S="1"
    )
    assert warmed["config"] is False
    assert warmed["pooled_idle"] == 0
    assert warmed["redis_idle"] >= 1  # Redis is up: its warm-up still ran


BLAS_PROBE = """
import json
import chatsite.asgi
import threadpoolctl
print(json.dumps({
    "blas_threads": [i["num_threads"] for i in threadpoolctl.threadpool_info()
                     if i["user_api"] == "blas"],
}))
"""


def _without_blas_setting() -> dict[str, str]:
    """The test environment without an operator's OPENBLAS_NUM_THREADS."""
    os_env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    return {**os_env, "DJANGO_SETTINGS_MODULE": "chatsite.settings.test"}


def test_the_web_process_runs_numpy_on_one_blas_thread():
    """The classifier's products are small: OpenBLAS helper threads would only spin
    beside the requests (chatsite.blas_threads); an operator's setting wins."""
    out = subprocess.run(
        [sys.executable, "-c", BLAS_PROBE],
        cwd=ROOT,
        env={**_without_blas_setting(), "SAFETY_INPUT_ENABLED": "1"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout.strip().splitlines()[-1])["blas_threads"] == [1]
    chosen = _warmed(BLAS_PROBE, OPENBLAS_NUM_THREADS="2", SAFETY_INPUT_ENABLED="1")
    assert chosen["blas_threads"] == [2]


GUARDS_PROBE = """
import contextvars, gc, json
import chatsite.asgi
from django.urls import get_resolver
from django.urls.resolvers import URLResolver

def guard(resolver):  # the ContextVar behind the resolver's asgiref Local
    return object.__getattribute__(resolver._local, "_storage")._data

gc.unfreeze()  # the import froze what it built: get_objects() lists no frozen one
resolvers = [o for o in gc.get_objects() if isinstance(o, URLResolver)]
guards = {guard(r) for r in resolvers}
context = contextvars.copy_context()  # what every request's task starts from
print(json.dumps({
    "populated": sum(bool(r._populated) for r in resolvers),
    "guards_in_context": sum(1 for var in context if var in guards),
}))
"""


def test_the_url_warm_up_leaves_no_resolver_guard_in_the_requests_context():
    """The resolvers' reverse tables are built at import, but their context-local
    recursion guards are not in the context every request copies (asgiref walks
    each of its variables on both sides of every sync_to_async hop)."""
    warmed = _warmed(GUARDS_PROBE)
    assert warmed["populated"] > 20  # the root URLconf's, the admin's, ...
    assert warmed["guards_in_context"] == 0
