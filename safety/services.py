"""Writes of the safety app: input moderation (DESIGN §4.2, §10).

:func:`input_moderate` is called by the gateway's admission
(:func:`gateway.generations.generation_admit`) before anything is reserved, looked up
or enqueued, so the chat page and the API enforce one policy and a blocked request
costs nothing.
"""

from __future__ import annotations

import logging
import math
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from chatsite.errors import ModerationBlocked
from inference.embeddings import EmbeddingUnavailable, TextVector
from safety.audit import audit_record, audit_snapshot
from safety.categories import Category, category_info
from safety.classifiers import (
    ModerationUnavailable,
    Verdict,
    classifier_get,
    classify_text,
    unavailable_verdict,
)
from safety.models import Action, AuditLogEntry, ModerationEvent, Suspension
from safety.selectors import SafetyConfig, safety_config, suspension_active

__all__ = [
    "Match",
    "ModerationBlocked",
    "abuse_record",
    "abuse_score",
    "event_review",
    "input_moderate",
    "policy_matches",
    "suspension_create",
    "suspension_lift",
]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Match:
    """A category that matched under its policy: its score (0..1) and action."""

    category: Category
    score: float
    action: str


def policy_matches(verdict: Verdict, *, config: SafetyConfig) -> list[Match]:
    """The categories ``verdict`` matches under the admin's policies, highest score first.

    A policy with a threshold matches when the category's score is at or above it; one
    without uses the backend's own decision (``verdict.flagged``). Categories whose
    action is ``off`` never match.
    """
    matches = []
    for category in Category:
        policy = config.policy(category)
        if policy.action == Action.OFF:
            continue
        score = float(verdict.scores.get(category, 0.0))
        hit = (
            category in verdict.flagged
            if policy.threshold is None
            else score >= policy.threshold
        )
        if hit:
            matches.append(Match(category=category, score=score, action=policy.action))
    return sorted(matches, key=lambda m: -m.score)


def blocked_message(category: Category) -> str:
    """The message a user whose input was blocked in ``category`` sees: which policy,
    what they can do instead, and that nothing was charged."""
    info = category_info(category)
    return (
        "Your message was not sent: it goes against our content policy on "
        f"{category.label.lower()}. {info.user_advice} If you think this is a "
        "mistake, rephrase your message and send it again. Nothing was charged."
    )


def _verdict(*, text: str, query: TextVector | None) -> Verdict:
    """Classify ``text`` with the configured backend, reading the shared vector of
    ``query`` (when it is of ``text``) instead of embedding again; applies the fail
    policy (raises ModerationUnavailable when failing closed)."""
    classifier = classifier_get()
    vector = None
    if query is not None and classifier.uses_vector and query.text == text:
        try:
            vector = query.vector
        except EmbeddingUnavailable as exc:
            logger.warning("no vector for input moderation: %s", exc)
            return unavailable_verdict(ModerationUnavailable(), classifier=classifier)
    try:
        return classify_text(text, vector=vector, classifier=classifier)
    except ModerationUnavailable as exc:
        # failing closed: the user sees the one clear message, not the backend's detail
        raise ModerationUnavailable() from exc


def input_moderate(
    *,
    user: AbstractBaseUser,
    text: str,
    surface: str,
    query: TextVector | None = None,
    conversation_id: uuid.UUID | str | None = None,
    message_id: uuid.UUID | str | None = None,
    job_id: str = "",
) -> Verdict:
    """Screen a user's ``text`` before the gateway spends anything on it.

    ``surface``: a :class:`ModerationEvent.Surface` value (chat / api); ``query``: the
    turn's shared :class:`TextVector` of ``text`` (embedded once per turn: the
    classifier reads its vector instead of embedding again); ``conversation_id``,
    ``message_id``, ``job_id``: what an event refers to, when known.

    Classifies, applies the per-category policies (:func:`policy_matches`) and
    records one :class:`ModerationEvent` when a category matches: ``block`` when any
    matching category blocks (the highest-scoring blocking one), else ``flag`` (the
    highest-scoring one). Returns the verdict when the text may pass. Raises
    :class:`ModerationBlocked` (400 ``content_policy_violation``) on block, and
    :class:`ModerationUnavailable` (503) when the backend is down and
    SAFETY_FAIL_CLOSED is set; failing open, the text passes unchecked (logged).
    """
    verdict = _verdict(text=text, query=query)
    if not verdict.available:
        return verdict
    matches = policy_matches(verdict, config=safety_config())
    if not matches:
        return verdict
    blocking = [m for m in matches if m.action == Action.BLOCK]
    top = blocking[0] if blocking else matches[0]
    action = (
        ModerationEvent.EventAction.BLOCK
        if blocking
        else ModerationEvent.EventAction.FLAG
    )
    ModerationEvent.objects.create(
        user=user,
        surface=surface,
        direction=ModerationEvent.Direction.INPUT,
        category=top.category,
        score=top.score,
        scores={c.value: round(float(s), 4) for c, s in verdict.scores.items()},
        action=action,
        text=text,
        conversation_id=conversation_id,
        message_id=message_id,
        job_id=job_id,
        backend=verdict.backend,
    )
    logger.info(
        "input %s: user %s, %s (%.2f) on %s",
        action,
        user.pk,
        top.category.value,
        top.score,
        surface,
    )
    if blocking:
        consequence = abuse_record(user=user)
        raise ModerationBlocked(
            f"{blocked_message(top.category)} {consequence}", category=top.category
        )
    return verdict


# --- Abuse limits and suspensions ---------------------------------------------------


def _duration_words(seconds: float) -> str:
    hours = seconds / 3600
    if hours >= 48:
        return f"{round(hours / 24)} days"
    if hours >= 1:
        return f"{round(hours)} hour{'s' if round(hours) != 1 else ''}"
    return f"{max(1, round(seconds / 60))} minutes"


def abuse_score(*, user: AbstractBaseUser, now: datetime | None = None) -> float:
    """The user's abuse score now: each blocked input counts 1, halved every
    SAFETY_ABUSE_HALF_LIFE_S seconds since it happened.

    Computed from the :class:`ModerationEvent` rows themselves (no separate counter
    to keep in step): blocked input events that staff have not dismissed, since the
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
        .exclude(status=ModerationEvent.Status.DISMISSED)
        .values_list("created_at", flat=True)[:1000]
    )
    return sum(0.5 ** (max(0.0, (now - t).total_seconds()) / half_life) for t in times)


def abuse_record(*, user: AbstractBaseUser) -> str:
    """Weigh a blocked input just recorded: suspend the user when their
    :func:`abuse_score` reaches SAFETY_ABUSE_SUSPEND_SCORE (for SAFETY_ABUSE_SUSPEND_S
    seconds, the reason naming the violations); return the sentence the block message
    adds (the suspension, or how many more blocked messages lead to one).

    Race-free: the suspension is created under a lock on the user's row, after
    checking again that none is active, so concurrent violations suspend once.
    """
    threshold = settings.SAFETY_ABUSE_SUSPEND_SCORE
    length = _duration_words(settings.SAFETY_ABUSE_SUSPEND_S)
    score = abuse_score(user=user)
    if score + 1e-9 < threshold:
        left = max(1, math.ceil(threshold - score - 1e-9))
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
            )
    until = suspension.until.strftime("%Y-%m-%d %H:%M UTC")
    return f"Because of repeated violations your account is suspended until {until}."


def suspension_create(
    *,
    user: AbstractBaseUser,
    until: datetime,
    reason: str,
    actor: AbstractBaseUser | None,
    actor_label: str | None = None,
) -> Suspension:
    """Suspend ``user`` until ``until`` (aware datetime) for ``reason``; audited.

    ``actor``: the staff member (None: a command run or the abuse limit, named by
    ``actor_label``). Takes effect on the user's next request (not cached).
    """
    with transaction.atomic():
        suspension = Suspension.objects.create(
            user=user,
            until=until,
            reason=reason,
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
    user: AbstractBaseUser,
    actor: AbstractBaseUser | None,
    actor_label: str | None = None,
) -> list[Suspension]:
    """Lift every suspension of ``user`` in force now; return them (empty: none).

    Each lift is audited (before → after). Idempotent: a second call lifts nothing.
    """
    now = timezone.now()
    lifted = []
    with transaction.atomic():
        for suspension in Suspension.objects.select_for_update().filter(
            user_id=user.pk, lifted_at__isnull=True, until__gt=now
        ):
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
    actor: AbstractBaseUser | None,
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
