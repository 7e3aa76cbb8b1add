"""Bench users: accounts on a plan of their own, the pools it allows, their memory.

Each benchmark uses its own user, plan and pool names, so that one run's rows never
route another's turns; the rows are kept between runs (made once, updated after).
"""

from __future__ import annotations

from typing import Any

from bench.corpus import DOCUMENT, FACTS


def pool_upsert(name: str, **fields: Any) -> Any:
    """Create or update the :class:`gateway.models.ModelPool` ``name`` with
    ``fields`` (model, engine, queue_threshold...); return it."""
    from gateway.models import ModelPool

    pool, _ = ModelPool.objects.update_or_create(name=name, defaults=fields)
    return pool


def plan_user(
    username: str,
    *,
    plan: str,
    pools: list[Any],
    password: str | None = None,
    plan_defaults: dict[str, Any] | None = None,
) -> Any:
    """Return the user ``username`` (created if missing) subscribed to the plan
    ``plan`` (created with ``plan_defaults`` if missing; no token limits unless they
    say so), which allows exactly ``pools``. ``password``: the password a new user
    gets, to sign in over HTTP (an existing one keeps its own: hashing it again costs
    a PBKDF2 run per user)."""
    from django.contrib.auth import get_user_model

    from gateway.models import Plan, Subscription

    user, created = get_user_model().objects.get_or_create(username=username)
    if created and password is not None:
        user.set_password(password)
        user.save()
    # no API request limit either (a plan's default is gateway.models.Plan's)
    unlimited = {"requests_per_minute": None, "key_requests_per_minute": None}
    chosen, _ = Plan.objects.get_or_create(
        name=plan, defaults={**unlimited, **(plan_defaults or {})}
    )
    chosen.allowed_pools.set(pools)
    Subscription.objects.update_or_create(user=user, defaults={"plan": chosen})
    return user


def memory_add(user: Any) -> Any:
    """Give ``user`` the 5 :data:`bench.corpus.FACTS` (if it has no fact yet) and the
    :data:`bench.corpus.DOCUMENT` as a ready document (if it has none); return the
    document.

    Needs a live embedding worker: the facts and the document's chunks are embedded by
    it. Raises AssertionError when the document does not become ready.
    """
    from memory import services as memory_services
    from memory.models import Document, MemoryFact

    if not MemoryFact.objects.filter(user=user).exists():
        for fact in FACTS:
            memory_services.fact_add(user=user, text=fact)
    document = Document.objects.filter(user=user, status="ready").first()
    if document is None:
        data, name = DOCUMENT.encode(), "greenhouse.md"
        upload = memory_services.document_upload(
            user=user, name=name, data=data, ingest_on_commit=False
        )
        document = memory_services.document_ingest(document_id=upload.id)
        assert document.status == "ready", document.error
    return document
