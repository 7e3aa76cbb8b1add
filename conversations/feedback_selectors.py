"""Reads of the answers' feedback: satisfaction per model and day (the admin's
chart) and the rows an export takes."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.db.models import Count, Q, QuerySet
from django.db.models.functions import TruncDate

from conversations.models import Feedback


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
