"""Writes of the safety app for staff and abuse limits (DESIGN §10): the decaying
per-user abuse score, suspensions (automatic and by staff) and the review of moderation
events; every staff write is audited (:mod:`audit`).

Moderation itself (screening text, recording events) is in :mod:`safety.services`,
which calls :func:`abuse_record` when it blocks an input.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable
from datetime import datetime, timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from audit.models import AuditLogEntry
from audit.services import audit_record, audit_snapshot
from safety.categories import Category
from safety.models import ModerationEvent, Suspension
from safety.selectors import suspension_active

__all__ = [
    "abuse_record",
    "abuse_score",
    "event_review",
    "suspension_create",
    "suspension_lift",
]

logger = logging.getLogger(__name__)


def _duration_words(seconds: float) -> str:
    hours = seconds / 3600
    if hours >= 48:
        return f"{round(hours / 24)} days"
    if hours >= 1:
        return f"{round(hours)} hour{'s' if round(hours) != 1 else ''}"
    return f"{max(1, round(seconds / 60))} minutes"


def abuse_score(*, user: User, now: datetime | None = None) -> float:
    """The user's abuse score now: each counted blocked input counts 1, halved every
    SAFETY_ABUSE_HALF_LIFE_S seconds since it happened.

    Computed from the :class:`ModerationEvent` rows themselves (no separate counter
    to keep in step): blocked input events that count (``abuse``: a confident or
    second-stage block, :func:`safety.services.block_counts`; or staff confirmed
    them) and that staff have not dismissed, since the
    user's latest suspension began (a suspension settles what came before it), within
    20 half-lives (older ones weigh under one millionth).
    """
    now = now or timezone.now()
    half_life = settings.SAFETY_ABUSE_HALF_LIFE_S
    since = now - timedelta(seconds=20 * half_life)
    latest = (
        Suspension.objects.filter(user_id=user.pk)
        .order_by("-created_at")
        .values_list("created_at", flat=True)
        .first()
    )
    if latest is not None and latest > since:
        since = latest
    times = (
        ModerationEvent.objects.filter(
            user_id=user.pk,
            direction=ModerationEvent.Direction.INPUT,
            action=ModerationEvent.EventAction.BLOCK,
            created_at__gte=since,
        )
        .filter(Q(abuse=True) | Q(status=ModerationEvent.Status.CONFIRMED))
        .exclude(status=ModerationEvent.Status.DISMISSED)
        .values_list("created_at", flat=True)[:1000]
    )
    return sum(0.5 ** (max(0.0, (now - t).total_seconds()) / half_life) for t in times)


def abuse_record(*, user: User, cause: ModerationEvent | None = None) -> str:
    """Weigh a counted blocked input just recorded (``cause``, the suspension's
    cause if it leads to one): suspend the user when their
    :func:`abuse_score` reaches SAFETY_ABUSE_SUSPEND_SCORE (for SAFETY_ABUSE_SUSPEND_S
    seconds, the reason naming the violations); return the sentence the block message
    adds (the suspension, or how many more blocked messages lead to one).

    Race-free: the suspension is created under a lock on the user's row, after
    checking again that none is active, so concurrent violations suspend once.
    """
    threshold = settings.SAFETY_ABUSE_SUSPEND_SCORE
    length = _duration_words(settings.SAFETY_ABUSE_SUSPEND_S)
    # In hundredths: violations seconds apart have decayed by a few millionths (a
    # 6 h half-life loses 1% in 5 min), which must not let the Nth of N blocked
    # messages fall short of the threshold, nor tell the user "N more" after the first.
    score = round(abuse_score(user=user), 2)
    if score < threshold:
        left = max(1, math.ceil(threshold - score))
        return (
            f"If {left} more message{'s are' if left != 1 else ' is'} blocked soon, "
            f"your account will be suspended for {length}."
        )
    with transaction.atomic():
        get_user_model().objects.select_for_update().filter(pk=user.pk).first()
        suspension = suspension_active(user=user)
        if suspension is None:
            categories = (
                ModerationEvent.objects.filter(
                    user_id=user.pk,
                    direction=ModerationEvent.Direction.INPUT,
                    action=ModerationEvent.EventAction.BLOCK,
                    abuse=True,
                )
                .exclude(status=ModerationEvent.Status.DISMISSED)
                .order_by("-created_at")
                .values_list("category", flat=True)[:20]
            )
            named = ", ".join(sorted({Category(c).label.lower() for c in categories}))
            suspension = suspension_create(
                user=user,
                until=timezone.now()
                + timedelta(seconds=settings.SAFETY_ABUSE_SUSPEND_S),
                reason=f"Repeated messages against the content policy ({named}).",
                actor=None,
                actor_label="abuse limit",
                cause=cause,
            )
    until = suspension.until.strftime("%Y-%m-%d %H:%M UTC")
    return f"Because of repeated violations your account is suspended until {until}."


def suspension_create(
    *,
    user: User,
    until: datetime,
    reason: str,
    actor: User | None,
    actor_label: str | None = None,
    cause: ModerationEvent | None = None,
) -> Suspension:
    """Suspend ``user`` until ``until`` (aware datetime) for ``reason``; audited.

    ``actor``: the staff member (None: a command run or the abuse limit, named by
    ``actor_label``); ``cause``: the blocked input that took the abuse score over the
    limit (an upheld appeal of it lifts the suspension). Takes effect on the user's
    next request (not cached).
    """
    with transaction.atomic():
        suspension = Suspension.objects.create(
            user=user,
            until=until,
            reason=reason,
            cause=cause,
            created_by=actor if actor is not None and actor.pk else None,
        )
        audit_record(
            actor=actor,
            actor_label=actor_label,
            action=AuditLogEntry.Verb.SUSPEND,
            obj=suspension,
            before=None,
            after=audit_snapshot(suspension),
        )
    return suspension


def suspension_lift(
    *,
    user: User,
    actor: User | None,
    actor_label: str | None = None,
    ids: Iterable[int] | None = None,
) -> list[Suspension]:
    """Lift every suspension of ``user`` in force now (only those of ``ids`` when
    given); return them (empty: none).

    Each lift is audited (before → after). Idempotent: a second call lifts nothing.
    """
    now = timezone.now()
    lifted = []
    rows = Suspension.objects.select_for_update().filter(
        user_id=user.pk, lifted_at__isnull=True, until__gt=now
    )
    if ids is not None:
        rows = rows.filter(id__in=list(ids))
    with transaction.atomic():
        for suspension in rows:
            before = audit_snapshot(suspension)
            suspension.lifted_at = now
            suspension.lifted_by = actor if actor is not None and actor.pk else None
            suspension.save(update_fields=["lifted_at", "lifted_by"])
            audit_record(
                actor=actor,
                actor_label=actor_label,
                action=AuditLogEntry.Verb.LIFT,
                obj=suspension,
                before=before,
                after=audit_snapshot(suspension),
            )
            lifted.append(suspension)
    return lifted


def event_review(
    *,
    events: Iterable[ModerationEvent],
    status: str,
    actor: User | None,
    actor_label: str | None = None,
) -> int:
    """Set staff's review ``status`` (confirmed / dismissed) on ``events``; audited
    per event whose status changes. Returns how many changed. A dismissed blocked
    input no longer counts towards the user's :func:`abuse_score`."""
    verb = (
        AuditLogEntry.Verb.CONFIRM
        if status == ModerationEvent.Status.CONFIRMED
        else AuditLogEntry.Verb.DISMISS
    )
    changed = 0
    with transaction.atomic():
        for event in events:
            if event.status == status:
                continue
            before = audit_snapshot(event)
            event.status = status
            event.save(update_fields=["status"])
            audit_record(
                actor=actor,
                actor_label=actor_label,
                action=verb,
                obj=event,
                before=before,
                after=audit_snapshot(event),
            )
            changed += 1
    return changed
