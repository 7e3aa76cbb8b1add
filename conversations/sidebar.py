"""The sidebar's chat list (a read): the user's most recently active conversations,
grouped by the day of their last activity (Today, Yesterday, Previous 7 days, Older),
as ChatGPT and Open WebUI group theirs.

Days are those of the site's time zone (``TIME_ZONE``, Django's current time zone):
the site keeps no time zone per user. The list is bounded
(CHAT_SIDEBAR_CONVERSATIONS); older conversations are reached through the search page,
whose blank query lists recent chats. One query, whatever the number of rows.
"""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass, field

from django.conf import settings
from django.contrib.auth.models import User
from django.utils import timezone

from conversations.selectors import conversation_list

# Group titles, newest first; a conversation goes to the first whose day range holds
# the (local) day of its last activity.
TODAY, YESTERDAY, WEEK, OLDER = "Today", "Yesterday", "Previous 7 days", "Older"


@dataclass(frozen=True)
class SidebarEntry:
    """One conversation of the list: its id, title and last activity (aware)."""

    id: uuid.UUID
    title: str
    updated_at: dt.datetime


@dataclass
class SidebarGroup:
    """A date group: ``title`` (one of TODAY, YESTERDAY, WEEK, OLDER) and its
    conversations, most recently active first."""

    title: str
    entries: list[SidebarEntry] = field(default_factory=list)


@dataclass(frozen=True)
class Sidebar:
    """The chat list: non-empty ``groups`` in date order; ``more`` is True when the
    user has conversations beyond the ones listed."""

    groups: list[SidebarGroup]
    more: bool


def group_title(*, day: dt.date, today: dt.date) -> str:
    """Return the group of a conversation last active on local ``day`` when it is
    ``today``: TODAY (also for a day after today: a clock ahead), YESTERDAY, WEEK (2 to
    7 days ago) or OLDER."""
    age = (today - day).days
    if age <= 0:
        return TODAY
    if age == 1:
        return YESTERDAY
    if age <= 7:
        return WEEK
    return OLDER


def sidebar_conversations(
    *, user: User, now: dt.datetime | None = None, limit: int | None = None
) -> Sidebar:
    """Return the user's ``limit`` (default CHAT_SIDEBAR_CONVERSATIONS) most recently
    active, unarchived conversations grouped by the day of ``updated_at`` in the
    current time zone, relative to ``now`` (default: the present). One query: only
    ``id``, ``title`` and ``updated_at`` are read, one row past ``limit`` to know
    whether there are more."""
    limit = limit or settings.CHAT_SIDEBAR_CONVERSATIONS
    now = now or timezone.now()
    today = timezone.localtime(now).date()
    rows = list(
        conversation_list(user=user).values_list("id", "title", "updated_at")[
            : limit + 1
        ]
    )
    groups: list[SidebarGroup] = []
    for conv_id, title, updated_at in rows[:limit]:
        name = group_title(day=timezone.localtime(updated_at).date(), today=today)
        if not groups or groups[-1].title != name:
            groups.append(SidebarGroup(title=name))
        groups[-1].entries.append(
            SidebarEntry(id=conv_id, title=title, updated_at=updated_at)
        )
    return Sidebar(groups=groups, more=len(rows) > limit)
