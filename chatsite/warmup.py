"""What a web process loads before its first request, so that the first turn of a
fresh process costs at most twice a warm one (docs/benchmarks.md).

:func:`web_warm` runs when ``chatsite.asgi`` is imported, before the web server (uvicorn) listens: what
needs neither the database nor Redis. :func:`services_warm` then runs in a daemon
thread (WEB_WARM_SERVICES), so a process still starts while PostgreSQL or Redis is
down: it opens the pooled connections a turn uses and loads what the first turn
would otherwise load from them.

A fresh process's first turn pays, on top of a warm one's: the database (a fresh
PostgreSQL backend's catalog caches, the gateway's config snapshot), the regexes of
the URLs a turn's JSON names, and the first Redis connections.
"""

from __future__ import annotations

import contextvars
import logging
import re
import threading

from django.conf import settings
from django.urls import Resolver404, get_resolver, get_script_prefix, reverse

logger = logging.getLogger(__name__)


def url_regexes_warm() -> None:
    """Compile the regexes that ``reverse()`` builds for each URL of the root URLconf.

    Django builds its reverse tables on the first ``reverse()`` and then, on every
    call, checks the candidate path against ``"^" + prefix + pattern`` with
    ``re.search``: the first call for each URL compiles that string (``re``'s own
    cache then keeps it; 512 entries, more than the site's URLs). Namespaced URLs
    (the admin's) are not on a turn's path and are left alone.
    """
    resolver = get_resolver()
    reverse("chat-home")  # builds the reverse tables
    prefix = re.escape(get_script_prefix())
    for key in list(resolver.reverse_dict):
        for (
            _possibility,
            pattern,
            _defaults,
            _converters,
        ) in resolver.reverse_dict.getlist(key):
            re.compile(f"^{prefix}{pattern}")


def urls_warm() -> None:
    """Compile the root URLconf's pattern regexes and build its reverse tables
    (:func:`url_regexes_warm`).

    What they build is kept on the resolvers themselves; but each resolver (some
    thirty: the admin's are most) also sets its own context-local (asgiref
    ``Local``) recursion guard while it builds its tables. Set in the context every
    request's task copies, those thirty context variables are in every request's
    context, and asgiref walks all of a context's variables, re-homing each
    ``Local``, on both sides of every ``sync_to_async`` hop. Run this in a copy of
    the context (``contextvars.copy_context().run``) to leave them out: a guard
    that is not set reads as unset (False), as the built one does.
    """
    try:  # a path no pattern matches: every pattern's regex is compiled on the way
        get_resolver().resolve("/__warm__/none/")
    except Resolver404:
        pass
    url_regexes_warm()


def web_warm() -> None:
    """Load, before the first request, what every turn needs, so that the first turn of
    a fresh process costs what a warm one does (within 2x):

    - the serving model's tokenizer (a vocabulary-only read of the GGUF, no weights;
      DESIGN §9: prompts are counted exactly), which the first turn would load;
    - the URLconf's pattern regexes and reverse tables, which Django builds on first
      use: the turn's JSON names six URLs, and building them is most of a cold
      first POST (docs/benchmarks.md);
    - the modules the answer's stream imports on first use (output moderation);
    - the moderation classifier (SAFETY_INPUT_ENABLED or SAFETY_OUTPUT_ENABLED: the
      first turn or answer would load it; the embedded backend reads its model file
      once per process).
    - Django's cache objects (every ``CACHES`` alias; no connection is opened):
      Django keeps them in a context-local (asgiref ``Local``), and every request's
      task starts from a copy of the context the server was started in, so an alias
      first used inside a request was built again for every request, with its own
      Redis pool and a new connection (the session's read, django-ratelimit's count).

    The URLconf is warmed in a copy of the context (:func:`urls_warm`), not in the
    one every request copies.

    A missing model file is reported by the first turn that needs it, not here. No
    database or Redis is touched here: see :func:`services_warm_start`.
    """
    from django.core.cache import caches

    import gateway.generations.moderation  # noqa: F401  imported by the first stream
    from inference.tokens import prompt_counter
    from safety.classifiers import classifier_get

    try:
        prompt_counter(settings.MEMORY_TOKENIZER_ENGINE)
    except (FileNotFoundError, ValueError):
        pass
    contextvars.copy_context().run(urls_warm)
    for alias in settings.CACHES:
        caches[alias]  # noqa: B018  built here, in the context every request copies
    if settings.SAFETY_INPUT_ENABLED or settings.SAFETY_OUTPUT_ENABLED:
        try:
            classifier_get()
        except (FileNotFoundError, ValueError, ImportError):
            pass


def database_warm() -> None:
    """Open a pooled connection and load, in its PostgreSQL backend, the catalog
    entries of every table of the site, and the gateway's config snapshot.

    A new backend reads each relation's catalog rows (columns, indexes, constraints)
    on its first query of it: the eight queries of a turn took 4.3-5.4 ms on a new
    connection and 1.7-1.8 ms on a used one; a ``LIMIT 0`` read of the site's 29
    tables first took 10-13 ms and brought them to 2.3 ms (dev machine, a script
    over psycopg). The connection then goes back to the pool, where the first
    request finds it.
    """
    from django.apps import apps
    from django.db import connection

    from gateway.selectors import gateway_config

    tables = sorted(
        {
            model._meta.db_table
            for model in apps.get_models(include_auto_created=True)
            if model._meta.managed and not model._meta.proxy
        }
    )
    quote = connection.ops.quote_name
    try:
        gateway_config()
        with connection.cursor() as cursor:
            for table in tables:
                cursor.execute(f"SELECT * FROM {quote(table)} LIMIT 0")
    finally:
        connection.close()  # with the pool: back to the pool


def redis_warm() -> None:
    """Open the process's sync Redis connections: the one of inference's client
    (queues, quotas, admission) and the one of Django's cache (rate limits)."""
    from django.core.cache import cache

    from inference.connections import redis_sync

    redis_sync().ping()
    cache.get("warmup:none")


def services_warm() -> None:
    """:func:`database_warm` and :func:`redis_warm`; a failure is logged (at INFO:
    the service may be down while the process starts) and changes nothing."""
    for step in (database_warm, redis_warm):
        try:
            step()
        except Exception as exc:  # noqa: BLE001  a warm-up never fails the process
            logger.info("warm-up step %s skipped: %s", step.__name__, exc)


def services_warm_start() -> threading.Thread | None:
    """Run :func:`services_warm` in a daemon thread when WEB_WARM_SERVICES is on (the
    default; test settings turn it off: the test database is made later); return
    the thread, or None."""
    if not settings.WEB_WARM_SERVICES:
        return None
    thread = threading.Thread(target=services_warm, name="services-warm", daemon=True)
    thread.start()
    return thread
