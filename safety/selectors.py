"""Reads of the safety app: the per-category policies, cached per process."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC

from django.conf import settings
from django.contrib.auth.models import User
from django.db import connection
from django.db.models import Exists, OuterRef
from django.utils import timezone

from chatsite.errors import Suspended
from safety.categories import Category
from safety.models import Action, Appeal, CategoryPolicy, ModerationEvent, Suspension


@dataclass(frozen=True)
class Policy:
    """One category's policy: ``threshold`` 0..1 (None: the backend's) and ``action``."""

    threshold: float | None
    action: str


DEFAULT_POLICY = Policy(threshold=None, action=Action.BLOCK)

# The shipped policies (migration 0002 seeds the same rows): every category blocks at
# the backend's threshold except prompt injection, which is flag-only (see that
# migration for why). A category without a row gets its shipped policy.
SHIPPED_POLICIES: dict[Category, Policy] = {
    c: Policy(threshold=None, action=Action.FLAG)
    if c == Category.PROMPT_INJECTION
    else DEFAULT_POLICY
    for c in Category
}


@dataclass(frozen=True)
class SafetyConfig:
    """A snapshot of the admin-edited category policies (read-only, shared by threads).

    ``policies`` holds every category: one without a row gets its shipped policy
    (:data:`SHIPPED_POLICIES`), so a missing row never lets harm through.
    """

    policies: dict[Category, Policy]
    loaded_at: float

    def policy(self, category: Category) -> Policy:
        """The policy of ``category``."""
        return self.policies.get(category, SHIPPED_POLICIES[category])


_config: SafetyConfig | None = None
_config_lock = threading.Lock()


def _config_load() -> SafetyConfig:
    rows = {
        p.category: Policy(threshold=p.threshold, action=p.action)
        for p in CategoryPolicy.objects.all()
    }
    return SafetyConfig(
        policies={c: rows.get(c.value, SHIPPED_POLICIES[c]) for c in Category},
        loaded_at=time.monotonic(),
    )


def safety_config() -> SafetyConfig:
    """Return the category policies, reloaded after SAFETY_CONFIG_CACHE_S seconds.

    Like :func:`gateway.selectors.gateway_config`: admin edits reach a running process
    within that time (0: every call reloads, one query); saves the query on the path
    of every message.
    """
    global _config
    ttl = settings.SAFETY_CONFIG_CACHE_S
    config = _config
    if config is None or ttl <= 0 or time.monotonic() - config.loaded_at >= ttl:
        with _config_lock:
            config = _config_load()
            _config = config
    return config


# Set on a user object by a query that read, in the same request, whether the user has
# a suspension in force (:func:`suspension_in_force`, e.g. the API key lookup; the
# session's user read, safety.backends): False spares :func:`suspension_check` its own
# query. Never kept across requests.
SUSPENDED_ATTR = "suspended_now"


def suspension_in_force(*, user_ref: str) -> Exists:
    """An expression for another query: whether the user whose id is at ``user_ref``
    (an ``OuterRef`` path, e.g. ``"user_id"``) has a suspension in force now. The
    same rule as :func:`suspension_active`, read on the same partial index."""
    return Exists(
        Suspension.objects.filter(
            user_id=OuterRef(user_ref), lifted_at__isnull=True, until__gt=timezone.now()
        )
    )


def suspension_active(*, user: User) -> Suspension | None:
    """The user's suspension in force now (the one ending last), or None.

    One query on the partial index ``suspension_open`` (the user's unlifted
    suspensions). Not cached: it is cheap next to admission's own queries, and a cache
    would keep a lifted user locked out (or a new suspension unenforced) for its TTL.
    A suspension whose ``until`` has passed is over without anything having to run.
    """
    if user.pk is None:
        return None
    return (
        Suspension.objects.filter(
            user_id=user.pk, lifted_at__isnull=True, until__gt=timezone.now()
        )
        .order_by("-until")
        .first()
    )


def appealed_answers(*, user_id: int, job_ids: Iterable[str]) -> set[str]:
    """Of ``job_ids`` (answers' job ids, in chat their message ids as text), those
    whose cut by output moderation the user has already appealed. One query."""
    return set(
        Appeal.objects.filter(
            user_id=user_id,
            event__job_id__in=list(job_ids),
            event__direction=ModerationEvent.Direction.OUTPUT,
        ).values_list("event__job_id", flat=True)
    )


def event_appealed(*, event_id: int | None) -> bool:
    """Whether moderation event ``event_id`` has an appeal (False for None)."""
    return event_id is not None and Appeal.objects.filter(event_id=event_id).exists()


def suspension_message(suspension: Suspension) -> str:
    """What a suspended user reads: until when (UTC), why, and what to do."""
    until = suspension.until.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")
    reason = suspension.reason.strip().rstrip(".")
    return (
        f"Your account is suspended until {until}. Reason: {reason}. "
        "You can read your conversations, but not send messages or use the API "
        f"until then. {_appeal_advice(suspension)}"
    )


def _appeal_advice(suspension: Suspension) -> str:
    """How to contest ``suspension``: appeal the block that caused it, if one did."""
    if suspension.cause_id is None:
        return "If you think this is a mistake, contact the site's staff."
    return (
        "If you think this is a mistake, appeal the message that caused it "
        f'(moderation event {suspension.cause_id}: "This was a mistake" under a '
        f"refused message, or POST /v1/moderation/events/{suspension.cause_id}/appeal)."
    )


def suspended_now(*, user_id: int) -> bool:
    """Whether the user ``user_id`` has a suspension in force now: the rule of
    :func:`suspension_active` (unlifted, ``until`` after now, on the partial index
    ``suspension_open``) as one raw query, with no row read.

    For the path every writing request takes (:mod:`safety.middleware`): most of an
    ORM query's cost is Python building its SQL, not PostgreSQL answering it
    (bench/results/2026-12-04-turn-profile.md). Not cached, so a new suspension applies
    to the user's next request and a lifted one stops applying at once.
    """
    table = connection.ops.quote_name(Suspension._meta.db_table)
    sql = (
        f'SELECT 1 FROM {table} WHERE "user_id" = %s AND "lifted_at" IS NULL'
        ' AND "until" > %s LIMIT 1'
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [user_id, timezone.now()])
        return cursor.fetchone() is not None


def suspension_check(*, user: User) -> None:
    """Raise :class:`Suspended` (403 ``account_suspended``) when ``user`` is suspended.

    Admission (chat, API, embeddings) calls this first, before anything is moderated,
    reserved or enqueued.
    """
    if getattr(user, SUSPENDED_ATTR, None) is False:
        return  # read with the user, in this request (SUSPENDED_ATTR)
    suspension = suspension_active(user=user)
    if suspension is not None:
        error = Suspended(suspension_message(suspension))
        # the block that caused it (None: staff suspended the user), to appeal
        error.event_id = suspension.cause_id
        raise error
