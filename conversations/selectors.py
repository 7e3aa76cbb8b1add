"""Reads of conversations and messages, always scoped to the owner (CONVENTIONS §1)."""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass, field
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import Count, Prefetch, Q, QuerySet
from django.db.models.functions import TruncDate

from chatsite.errors import NotFound
from conversations.models import Conversation, Feedback, Message
from memory.models import Citation


def _as_uuid(value: Any) -> uuid.UUID:
    try:
        return value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))
    except ValueError as exc:
        raise NotFound() from exc


def conversation_list(*, user: AbstractBaseUser) -> QuerySet[Conversation]:
    """Return the user's conversations, most recently active first."""
    return Conversation.objects.filter(user=user, archived=False).order_by(
        "-updated_at"
    )


def conversation_get(*, user: AbstractBaseUser, conversation_id: Any) -> Conversation:
    """Return the user's conversation; raises NotFound for unknown or others' ids."""
    try:
        return Conversation.objects.get(id=_as_uuid(conversation_id), user=user)
    except Conversation.DoesNotExist as exc:
        raise NotFound("This conversation does not exist.") from exc


def message_get(
    *, user: AbstractBaseUser, conversation_id: Any, message_id: Any
) -> Message:
    """Return a message of the user's conversation; raises NotFound otherwise."""
    try:
        return Message.objects.select_related("conversation").get(
            id=_as_uuid(message_id),
            conversation_id=_as_uuid(conversation_id),
            conversation__user=user,
        )
    except Message.DoesNotExist as exc:
        raise NotFound("This message does not exist.") from exc


async def amessage_get(
    *, user: AbstractBaseUser, conversation_id: Any, message_id: Any
) -> Message:
    """Async :func:`message_get`."""
    try:
        return await Message.objects.select_related("conversation").aget(
            id=_as_uuid(message_id),
            conversation_id=_as_uuid(conversation_id),
            conversation__user=user,
        )
    except Message.DoesNotExist as exc:
        raise NotFound("This message does not exist.") from exc


@dataclass
class ThreadItem:
    """A message as shown: the current answer with its earlier versions."""

    message: Message
    previous_versions: list[Message] = field(default_factory=list)
    # the conversation owner's thumbs on ``message`` ("up" / "down"; "" = none)
    rating: str = ""

    @property
    def version_count(self) -> int:
        """How many answers this turn has had (1 = never regenerated)."""
        return 1 + len(self.previous_versions)


def thread_items(*, conversation: Conversation) -> list[ThreadItem]:
    """Return the thread in order: each user message followed by its newest answer.

    Older answers to the same user message (regenerated) are attached as
    ``previous_versions``, oldest first.
    """
    citations = Prefetch(
        "citations",
        queryset=Citation.objects.select_related("chunk__document").only(
            "number", "message_id", "chunk__ord", "chunk__document__title"
        ),
    )
    messages = list(
        conversation.messages.order_by("created_at").prefetch_related(citations)
    )
    ratings = dict(
        Feedback.objects.filter(
            user_id=conversation.user_id, message__conversation=conversation
        ).values_list("message_id", "rating")
    )
    answers: dict[Any, list[Message]] = {}
    for m in messages:
        if m.role == Message.Role.ASSISTANT and m.parent_id is not None:
            answers.setdefault(m.parent_id, []).append(m)
    items: list[ThreadItem] = []
    for m in messages:
        if m.role == Message.Role.ASSISTANT and m.parent_id is not None:
            continue
        items.append(ThreadItem(message=m))
        versions = answers.get(m.id)
        if versions:
            items.append(
                ThreadItem(
                    message=versions[-1],
                    previous_versions=versions[:-1],
                    rating=ratings.get(versions[-1].id, ""),
                )
            )
    return items


def context_messages(*, conversation: Conversation) -> list[Message]:
    """Return the messages a prompt may hold, oldest first.

    Uses the current answer of each turn; answers that ended in an error or are still
    streaming are left out (the model should not see an empty or failed reply).
    """
    kept: list[Message] = []
    for item in thread_items(conversation=conversation):
        m = item.message
        if m.role == Message.Role.ASSISTANT and (
            m.status in (Message.Status.STREAMING, Message.Status.ERROR)
            or not m.content
        ):
            continue
        if m.role in (Message.Role.USER, Message.Role.ASSISTANT):
            kept.append(m)
    return kept


def history_and_summary(
    *, conversation: Conversation
) -> tuple[list[dict[str, str]], str, int]:
    """Return ``(history, summary, covers)`` for the next prompt.

    ``history`` is :func:`context_messages` as OpenAI chat messages; ``summary`` is the conversation's last
    complete rolling summary and ``covers`` how many leading history messages it
    summarises (those created up to ``summary_upto``; 0 without a summary).
    """
    messages = context_messages(conversation=conversation)
    upto = conversation.summary_upto
    covers = 0
    if upto is not None:
        covers = sum(1 for m in messages if m.created_at <= upto.created_at)
    history = [{"role": m.role, "content": m.content} for m in messages]
    return history, (conversation.summary if upto is not None else ""), covers


def feedback_satisfaction(
    *, start: dt.date | None = None, end: dt.date | None = None
) -> list[dict[str, Any]]:
    """Return per model and UTC day (newest first): ``up``, ``down``, ``total``
    ratings and ``share_up`` (0-1, thumbs up over all ratings), counted by the day a
    rating was last given. ``start``/``end`` (inclusive days) bound the range."""
    rows = Feedback.objects.all()
    if start is not None:
        rows = rows.filter(updated_at__date__gte=start)
    if end is not None:
        rows = rows.filter(updated_at__date__lte=end)
    grouped = (
        rows.annotate(day=TruncDate("updated_at", tzinfo=dt.UTC))
        .values("model", "day")
        .annotate(
            up=Count("id", filter=Q(rating=Feedback.Rating.UP)),
            down=Count("id", filter=Q(rating=Feedback.Rating.DOWN)),
            total=Count("id"),
        )
        .order_by("-day", "model")
    )
    return [{**row, "share_up": row["up"] / row["total"]} for row in grouped]


def feedback_export(*, since: dt.datetime | None = None) -> QuerySet[Feedback]:
    """Return the feedback given (or last changed) since ``since``, oldest first, with
    its message, the question it answers and the conversation loaded."""
    rows = Feedback.objects.select_related(
        "message", "message__parent", "message__conversation", "user"
    ).order_by("updated_at", "id")
    if since is not None:
        rows = rows.filter(updated_at__gte=since)
    return rows


def conversation_scope_ids(*, conversation: Conversation) -> list[int]:
    """Return the ids of the documents chosen for ``conversation``'s document scope
    (meaningful when its ``doc_scope`` is "some"), ascending."""
    return sorted(conversation.scope_documents.values_list("id", flat=True))
