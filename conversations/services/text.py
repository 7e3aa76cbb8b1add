"""What a message or a title may hold: visible text, no NUL, a length limit."""

from __future__ import annotations

import unicodedata
from typing import Any

from django.conf import settings

from chatsite.errors import InvalidInput, PayloadTooLarge
from chatsite.storable import text_problem
from conversations.titles import title_from_message

# Unicode categories that show nothing: controls, format marks (zero-width), separators
_INVISIBLE = {"Cc", "Cf", "Zs", "Zl", "Zp"}


def is_blank(text: str) -> bool:
    """True if ``text`` has no visible character (spaces, controls, zero-width marks)."""
    return all(ch.isspace() or unicodedata.category(ch) in _INVISIBLE for ch in text)


def text_check(text: str, *, what: str) -> None:
    """Raise InvalidInput if ``text`` cannot be stored: a NUL character or an
    unpaired surrogate (:func:`chatsite.storable.text_problem`)."""
    problem = text_problem(text)
    if problem:
        raise InvalidInput(
            f"Your {what} {problem}. Remove it and try again.",
            code="invalid_character",
        )


def validate_content(content: Any) -> str:
    """Return ``content`` if it can be sent as a message; raise InvalidInput (empty,
    NUL) or PayloadTooLarge (over CHAT_MAX_MESSAGE_CHARS characters)."""
    if not isinstance(content, str) or is_blank(content):
        raise InvalidInput(
            "Your message is empty. Type something to send.", code="empty_message"
        )
    text_check(content, what="message")
    limit = settings.CHAT_MAX_MESSAGE_CHARS
    if len(content) > limit:
        raise PayloadTooLarge(
            f"Your message is {len(content):,} characters long; the limit is {limit:,}. "
            "Shorten it or split it into several messages.",
            code="message_too_long",
        )
    return content


def title_from_text(text: str) -> str:
    """Return a conversation's title from its first message: the first paragraph's
    plain text (Markdown stripped), cut at a word boundary with "…" to
    CHAT_TITLE_MAX_CHARS characters (:func:`conversations.titles.title_from_message`).

    Never empty: text with nothing visible gives "New chat".
    """
    return title_from_message(text, max_chars=settings.CHAT_TITLE_MAX_CHARS)
