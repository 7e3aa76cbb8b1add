"""Appeals: a user's "this was a mistake" about a moderation event, and staff's
decision on it (DESIGN §10, docs/safety.md "Appeals").

An appeal lands in the moderation queue (the admin's Appeals list). Upheld (a false
positive): the event is dismissed and no longer counts toward the abuse score, an
automatic suspension it contributed to is lifted, and its text is stored as a
:class:`HardNegative` that ``manage.py moderation_train`` reads as a benign example.
Every staff decision is audited (:func:`safety.suspensions.event_review`,
:func:`safety.suspensions.suspension_lift`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from chatsite.errors import InvalidInput, NotFound
from safety.models import Appeal, HardNegative, ModerationEvent, Suspension
from safety.suspensions import event_review, suspension_lift

__all__ = [
    "APPEAL_COMMENT_MAX_CHARS",
    "answer_event_id",
    "appeal_create",
    "appeal_decide",
]

# The most characters of a user's comment on an appeal that are kept.
APPEAL_COMMENT_MAX_CHARS = 2000


def appeal_create(*, user: User, event_id: Any, comment: Any = "") -> Appeal:
    """Appeal the user's own moderation event ``event_id``; return the appeal.

    ``comment``: what the user says about it (at most :data:`APPEAL_COMMENT_MAX_CHARS`
    characters kept). Idempotent: a second appeal of the same event returns the first.
    Raises NotFound (404) for an unknown id or another user's event (never 403: no
    leak), InvalidInput for a comment that is not text.
    """
    try:
        pk = int(str(event_id))
    except ValueError:
        raise NotFound("This moderation event does not exist.") from None
    event = ModerationEvent.objects.filter(pk=pk, user_id=user.pk).first()
    if event is None:
        raise NotFound("This moderation event does not exist.")
    if comment is None:
        comment = ""
    if not isinstance(comment, str):
        raise InvalidInput("The comment must be text.", code="invalid_comment")
    appeal, _ = Appeal.objects.get_or_create(
        event=event,
        defaults={"user": user, "comment": comment.strip()[:APPEAL_COMMENT_MAX_CHARS]},
    )
    return appeal


def answer_event_id(*, user: User, job_id: Any) -> int:
    """The id of the output moderation event that cut the user's answer ``job_id``
    (in chat, the answer's message id). Raises NotFound when there is none or the
    answer is another user's."""
    event_id = (
        ModerationEvent.objects.filter(
            user_id=user.pk,
            job_id=str(job_id),
            direction=ModerationEvent.Direction.OUTPUT,
            action=ModerationEvent.EventAction.BLOCK,
        )
        .values_list("id", flat=True)
        .first()
    )
    if event_id is None:
        raise NotFound("No moderation decision was made on this answer.")
    return event_id


def appeal_decide(
    *, appeals: Iterable[Appeal], upheld: bool, actor: User | None
) -> int:
    """Decide open ``appeals``: ``upheld`` (a false positive) or rejected; return how
    many were decided (an appeal already decided is skipped).

    Upheld: the event is dismissed and stops counting (``abuse`` false), the user's
    automatic suspensions in force that it counted toward (caused by a block at or
    after it) are lifted, and its text is stored as a :class:`HardNegative`.
    Rejected: the event is confirmed (it counts toward the abuse score).
    """
    decided = 0
    for appeal in appeals:
        with transaction.atomic():
            row = Appeal.objects.select_for_update().get(pk=appeal.pk)
            if row.status != Appeal.Status.OPEN:
                continue
            event = ModerationEvent.objects.select_related("user").get(pk=row.event_id)
            row.status = Appeal.Status.UPHELD if upheld else Appeal.Status.REJECTED
            row.decided_at = timezone.now()
            row.decided_by = actor if actor is not None and actor.pk else None
            row.save(update_fields=["status", "decided_at", "decided_by"])
            if upheld:
                _false_positive(event=event, actor=actor)
            else:
                event_review(
                    events=[event],
                    status=ModerationEvent.Status.CONFIRMED,
                    actor=actor,
                )
            decided += 1
    return decided


def _false_positive(*, event: ModerationEvent, actor: User | None) -> None:
    """Undo what ``event`` did: dismiss it (no abuse points), lift the automatic
    suspensions it counted toward, keep its text as a hard negative."""
    event_review(events=[event], status=ModerationEvent.Status.DISMISSED, actor=actor)
    ModerationEvent.objects.filter(pk=event.pk).update(abuse=False)
    caused = Suspension.objects.filter(
        user_id=event.user_id,
        cause__isnull=False,
        cause__created_at__gte=event.created_at,
        created_at__gte=event.created_at,
    ).values_list("id", flat=True)
    suspension_lift(
        user=event.user, actor=actor, actor_label="appeal upheld", ids=list(caused)
    )
    HardNegative.objects.create(text=event.text, category=event.category, event=event)
