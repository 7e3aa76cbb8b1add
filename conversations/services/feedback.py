"""Feedback on answers: thumbs up/down with an optional reason and comment.

One row per user and answer version (:class:`conversations.models.Feedback`); giving
a new rating replaces the row whole, so no reason or comment of an earlier rating is
left behind. The answer's pool, model, TTFT and tokens and the user's plan are copied
in at rating time (from the message and its usage record).
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from chatsite.errors import InvalidInput, NotFound
from chatsite.storable import text_problem
from conversations import selectors
from conversations.models import Feedback, Message
from gateway import selectors as gateway_selectors
from inference import metrics

# Longest comment kept, characters (a note, not an essay; the admin list shows it).
FEEDBACK_COMMENT_MAX_CHARS = 2000

# The reasons that fit each rating (a thumbs up "Incorrect" makes no sense).
REASONS_BY_RATING: dict[str, frozenset[str]] = {
    Feedback.Rating.UP: frozenset(
        {Feedback.Reason.ACCURATE, Feedback.Reason.CLEAR, Feedback.Reason.OTHER}
    ),
    Feedback.Rating.DOWN: frozenset(
        {
            Feedback.Reason.WRONG,
            Feedback.Reason.UNHELPFUL,
            Feedback.Reason.INSTRUCTIONS,
            Feedback.Reason.REFUSED,
            Feedback.Reason.UNSAFE,
            Feedback.Reason.FORMAT,
            Feedback.Reason.OTHER,
        }
    ),
}


def _answer_get(*, user: User, conversation_id: Any, message_id: Any) -> Message:
    message = selectors.message_get(
        user=user, conversation_id=conversation_id, message_id=message_id
    )
    if message.role != Message.Role.ASSISTANT:
        raise NotFound("This answer does not exist.")
    return message


def _validated(rating: Any, reason: Any, comment: Any) -> tuple[str, str, str]:
    """Return ``(rating, reason, comment)`` cleaned; raise InvalidInput naming the
    field that is wrong."""
    if rating not in Feedback.Rating.values:
        raise InvalidInput("`rating` must be “up” or “down”.", code="invalid_rating")
    reason = reason or ""
    if not isinstance(reason, str) or (
        reason and reason not in REASONS_BY_RATING[rating]
    ):
        allowed = ", ".join(sorted(REASONS_BY_RATING[rating]))
        raise InvalidInput(
            f"`reason` {reason!r} does not fit a thumbs {rating}; use one of: "
            f"{allowed} (or none).",
            code="invalid_reason",
        )
    comment = comment or ""
    if not isinstance(comment, str):
        raise InvalidInput("`comment` must be text.", code="invalid_comment")
    comment = comment.strip()
    if len(comment) > FEEDBACK_COMMENT_MAX_CHARS:
        raise InvalidInput(
            f"The comment is {len(comment):,} characters long; the limit is "
            f"{FEEDBACK_COMMENT_MAX_CHARS:,}.",
            code="comment_too_long",
        )
    problem = text_problem(comment)
    if problem:
        raise InvalidInput(f"The comment {problem}.", code="invalid_comment")
    return rating, reason, comment


def feedback_set(
    *,
    user: User,
    conversation_id: Any,
    message_id: Any,
    rating: Any,
    reason: Any = "",
    comment: Any = "",
) -> Feedback:
    """Rate one of the user's answers (``rating`` "up"/"down"); replace any earlier
    rating of it whole; return the stored feedback.

    ``reason`` is "" or a :class:`Feedback.Reason` that fits the rating
    (:data:`REASONS_BY_RATING`); ``comment`` at most FEEDBACK_COMMENT_MAX_CHARS
    characters. Raises NotFound (another user's message, a user message, an unknown
    id) and InvalidInput (a bad rating, reason or comment; nothing is stored). Counts
    ``chatsite:feedback{model_name, rating}`` once the row is committed.
    """
    rating, reason, comment = _validated(rating, reason, comment)
    message = _answer_get(
        user=user, conversation_id=conversation_id, message_id=message_id
    )
    usage = gateway_selectors.usage_for_message(message_id=message.id)
    plan = gateway_selectors.plan_for_user(user=user)
    now = timezone.now()
    values = {
        "rating": rating,
        "reason": reason,
        "comment": comment,
        "pool": message.pool or (usage.pool if usage else ""),
        "model": message.model or (usage.model if usage else ""),
        "plan": plan.name,
        "ttft_ms": message.ttft_ms
        if message.ttft_ms is not None
        else (usage.ttft_ms if usage else None),
        "prompt_tokens": message.prompt_tokens
        if message.prompt_tokens is not None
        else (usage.prompt_tokens if usage else None),
        "completion_tokens": message.token_count
        if message.token_count is not None
        else (usage.completion_tokens if usage else None),
        "updated_at": now,
    }
    with transaction.atomic():
        feedback, _ = Feedback.objects.update_or_create(
            user=user,
            message=message,
            defaults=values,
            create_defaults={**values, "created_at": now},
        )
        model_name = feedback.model or "unknown"
        transaction.on_commit(
            lambda: metrics.FEEDBACK.labels(model_name=model_name, rating=rating).inc()
        )
    return feedback


def feedback_delete(*, user: User, conversation_id: Any, message_id: Any) -> bool:
    """Remove the user's rating of one of their answers; True if there was one.

    Raises NotFound for another user's message or an unknown id.
    """
    message = _answer_get(
        user=user, conversation_id=conversation_id, message_id=message_id
    )
    deleted, _ = Feedback.objects.filter(user=user, message=message).delete()
    return bool(deleted)
