"""What an import file becomes before anything is stored, whatever its format, and
the checks both readers share. Every failure is an InvalidInput naming where in the
file it is (conversation and message numbers count from 1)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from chatsite.errors import InvalidInput
from chatsite.storable import datetime_problem, text_problem

# A title that is empty in the file.
UNTITLED = "Imported conversation"
# Added to the title of an imported conversation whose title the importer already has.
IMPORTED_SUFFIX = " (imported)"
# Longest stored title, in characters (the rename limit too).
TITLE_MAX_CHARS = 200


@dataclass
class ImportedMessage:
    """One message to store; ``key`` and ``parent_key`` are the file's ids."""

    key: str
    parent_key: str | None
    role: str
    content: str
    created_at: dt.datetime
    status: str = "complete"
    model: str = ""
    pool: str = ""
    finish_reason: str = ""
    error: str = ""
    token_count: int | None = None
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    ttft_ms: int | None = None
    latency_ms: int | None = None
    cache_kind: str = ""
    # our own format only: chunk ids with their numbers, and the owner's rating
    citations: list[tuple[int, int]] = field(default_factory=list)
    feedback: dict[str, Any] | None = None
    # our own format only: an assistant's tool calls, a tool result's call and detail
    # (conversations.tool_steps shapes)
    tool_calls: list[dict[str, str]] = field(default_factory=list)
    tool_call_id: str = ""
    tool_name: str = ""
    tool_detail: dict[str, Any] = field(default_factory=dict)


@dataclass
class ImportedConversation:
    """One conversation to store, its messages in the file's order."""

    title: str
    created_at: dt.datetime
    updated_at: dt.datetime
    messages: list[ImportedMessage]
    current_leaf_key: str | None = None


def fail(where: str, problem: str) -> InvalidInput:
    """Return the InvalidInput for a problem at ``where`` in the file."""
    return InvalidInput(
        f"{where}: {problem} Nothing was imported.", code="invalid_import"
    )


def text_field(value: Any, where: str, name: str, *, limit: int | None = None) -> str:
    """Return ``value`` if it is a string without NUL and within ``limit`` characters
    (default CHAT_IMPORT_MAX_MESSAGE_CHARS); raise InvalidInput otherwise."""
    if not isinstance(value, str):
        raise fail(where, f"`{name}` must be a string.")
    problem = text_problem(value)
    if problem:
        raise fail(where, f"`{name}` {problem}.")
    limit = limit or settings.CHAT_IMPORT_MAX_MESSAGE_CHARS
    if len(value) > limit:
        raise fail(where, f"`{name}` is longer than {limit:,} characters.")
    return value


def time_field(value: dt.datetime, where: str, name: str) -> dt.datetime:
    """Return the time ``value`` in UTC (naive: taken as UTC); raise InvalidInput
    when it is outside the storable years (:func:`chatsite.storable.datetime_problem`)."""
    problem = datetime_problem(value)
    if problem:
        raise fail(where, f"`{name}` {problem}.")
    aware = value if value.tzinfo else value.replace(tzinfo=dt.UTC)
    return aware.astimezone(dt.UTC)


def title_clean(value: Any, where: str) -> str:
    """Return a stored title: spaces collapsed, at most 200 characters, never empty."""
    if value is None:
        return UNTITLED
    title = " ".join(text_field(value, where, "title").split())
    return title[:TITLE_MAX_CHARS].strip() or UNTITLED


def title_of_copy(title: str) -> str:
    """Return ``title`` marked as an imported copy: "<title> (imported)", the title
    cut so that the whole stays within TITLE_MAX_CHARS characters."""
    keep = TITLE_MAX_CHARS - len(IMPORTED_SUFFIX)
    return title[:keep].rstrip() + IMPORTED_SUFFIX


def count_field(value: Any, where: str, name: str) -> int | None:
    """Return ``value`` if it is None or a whole number from 0 to 2^31-1."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise fail(where, f"`{name}` must be a whole number or null.")
    if not 0 <= value < 2**31:
        raise fail(where, f"`{name}` is out of range.")
    return value


def conversations_count_check(count: int) -> None:
    """Raise InvalidInput when ``count`` conversations are more than
    CHAT_IMPORT_MAX_CONVERSATIONS (checked before parsing a large file, too)."""
    most = settings.CHAT_IMPORT_MAX_CONVERSATIONS
    if count > most:
        raise InvalidInput(
            f"The file holds {count:,} conversations; at most {most:,} "
            "can be imported at once. Nothing was imported.",
            code="import_too_large",
        )


def limits_check(conversations: list[ImportedConversation]) -> None:
    """Raise InvalidInput when the file holds no conversation, or more conversations,
    messages or characters of message text than CHAT_IMPORT_MAX_CONVERSATIONS /
    CHAT_IMPORT_MAX_MESSAGES / CHAT_IMPORT_MAX_TOTAL_CHARS."""
    if not conversations:
        raise InvalidInput(
            "The file holds no conversation to import.", code="invalid_import"
        )
    conversations_count_check(len(conversations))
    total = sum(len(c.messages) for c in conversations)
    most = settings.CHAT_IMPORT_MAX_MESSAGES
    if total > most:
        raise InvalidInput(
            f"The file holds {total:,} messages; at most {most:,} can be imported at "
            "once. Nothing was imported.",
            code="import_too_large",
        )
    chars = sum(
        len(m.content) + sum(len(t["arguments"]) for t in m.tool_calls)
        for c in conversations
        for m in c.messages
    )
    most = settings.CHAT_IMPORT_MAX_TOTAL_CHARS
    if chars > most:
        raise InvalidInput(
            f"The file holds {chars:,} characters of messages; at most {most:,} can "
            "be imported at once. Nothing was imported.",
            code="import_too_large",
        )
