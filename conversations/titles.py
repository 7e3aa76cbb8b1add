"""Conversation titles: the first-message title (:func:`title_from_message`) and which
model-written title may replace it (:func:`title_acceptable`).

Issue 11 ("Titles"): the title model (a small one) often answers the question instead
of naming it, and testers saw good first-message titles replaced by "105", "I'm glad to
help." and "The two planets mentione…". :func:`title_acceptable` is the one rule; it is
pure (no I/O), so the table and property tests in tests/conversations/test_titles.py
pin it down.
"""

from __future__ import annotations

import functools
import re
import unicodedata

from markdown_it import MarkdownIt
from markdown_it.token import Token

# A title is short: at most this many characters and words (docs/chat.md, Titles).
TITLE_MAX_CHARS = 60
TITLE_MAX_WORDS = 8
# A title that appears verbatim inside the answer with at least this many words is a
# piece of the answer, not a name for the conversation ("The two planets mentioned");
# shorter ones are topic words that a good answer repeats ("Green tea brewing").
FRAGMENT_MIN_WORDS = 4

# How replies start, not titles: whole words at the start (casefolded, apostrophes
# normalised to '), so "Okra recipes" or "Nobel prizes" stay titles.
_REPLY_OPENER = re.compile(
    r"^(?:i'm|i am|i'd|i would|i can|i will|i'll|sure|yes|no|ok|okay|of course|"
    r"certainly|absolutely|the answer|answer:|title:|(?:hello|hi|hey)(?: there|[!,])|"
    r"great question|good question|thanks|thank you|as an ai|here is|here's|"
    r"here are|you're welcome)(?![\w'-])"
)
_WORD = re.compile(r"\w+", re.UNICODE)


def _norm(text: str) -> str:
    """Casefold, curly apostrophes to straight ones, whitespace collapsed."""
    text = unicodedata.normalize("NFKC", text).replace("\u2019", "'")
    return " ".join(text.casefold().split())


def _words(text: str) -> list[str]:
    return _WORD.findall(_norm(text))


# a list item ("1. ", "2) ", "- ", "* ", "+ ") or a heading ("# ") at the start
_MARKDOWN_LINE = re.compile(r"^(\d+[.)]\s|[-*+]\s|#{1,6}\s)")


def title_acceptable(title: str, *, answer: str = "") -> bool:
    """Return True if ``title`` (model-written) names the conversation well enough to
    replace the first-message title.

    Accepted only when it is short (at most TITLE_MAX_CHARS characters and
    TITLE_MAX_WORDS words) and reads as a title, not an answer: it has a letter (not a
    number alone), does not open like a reply ("I'm", "Sure", "Yes", "The answer", …),
    does not end with "?", "…" / "..." or a sentence-final period, is not a line of
    Markdown (a list item such as "1. Apple", a heading, a table row, code), and is not a fragment
    of ``answer`` (it has at least FRAGMENT_MIN_WORDS words and appears in the answer
    verbatim; compared word by word, case-insensitively). The rule
    and its examples: docs/chat.md, "Titles".
    """
    text = " ".join(title.split())
    if not text or len(text) > TITLE_MAX_CHARS:
        return False
    words = _words(text)
    if not words or len(words) > TITLE_MAX_WORDS:
        return False
    if not any(ch.isalpha() for ch in text):
        return False  # "105", "3.14", "--"
    lowered = _norm(text)
    if _REPLY_OPENER.match(lowered):
        return False
    if text.endswith(("?", "…", "...", ".")):
        return False
    if _MARKDOWN_LINE.match(text) or "|" in text or "`" in text:
        return False  # a list item, heading or table row of the answer: "1. Apple"
    if len(words) >= FRAGMENT_MIN_WORDS:
        answer_words = _words(answer)
        joined = " " + " ".join(answer_words) + " "
        if " " + " ".join(words) + " " in joined:
            return False
    return True


# Only the start of a message is parsed for its title (characters): a title needs one
# paragraph, and the parse runs in the request that sends the first message.
TITLE_SOURCE_MAX_CHARS = 2_000
# Left off the end of a cut title before its ellipsis.
_CUT_TRAILING = " ,;:-\u2013\u2014([{"


@functools.cache
def _markdown() -> MarkdownIt:
    # the chat page's dialect (conversations/rendering.py): CommonMark, tables, ~~
    return MarkdownIt("commonmark", {"html": False}).enable(["table", "strikethrough"])


def _inline_text(token: Token) -> str:
    """The plain text of an inline token: text, code and image alt text; breaks as
    spaces; link targets, emphasis and other markup left out."""
    parts = []
    for child in token.children or []:
        if child.type in ("text", "code_inline", "image"):
            parts.append(child.content)  # an image's content is its alt text
        elif child.type in ("softbreak", "hardbreak"):
            parts.append(" ")
    return "".join(parts)


# One line with nothing the dialect reads as Markdown: a letter first (a digit may
# open an ordered list), then letters, digits, spaces and punctuation that marks
# nothing on one line (no _*`~|#<>[]\& and no line break). Such a line is one
# paragraph of plain text: its own first text (tests/conversations/test_titles.py
# holds the parse to that).
_PLAIN_LINE = re.compile(r"[^\W\d_](?:[^\W_]|[ ,.?!'\"%$@:;/()=+-])*")


def markdown_first_text(text: str) -> str:
    """Return the plain text of the first block of Markdown ``text`` that has any (a
    paragraph, heading, list item, table cell; a code block's first line), spaces
    collapsed; ``""`` when there is none. Only the first TITLE_SOURCE_MAX_CHARS
    characters are read; a plain line (:data:`_PLAIN_LINE`) is not parsed."""
    head = text[:TITLE_SOURCE_MAX_CHARS]
    if _PLAIN_LINE.fullmatch(head):
        return " ".join(head.split())
    return _markdown_first_text_parsed(head)


def _markdown_first_text_parsed(text: str) -> str:
    """:func:`markdown_first_text` of ``text`` by markdown-it's parse."""
    for token in _markdown().parse(text):
        if token.type == "inline":
            plain = _inline_text(token)
        elif token.type in ("fence", "code_block"):
            plain = next((ln for ln in token.content.splitlines() if ln.strip()), "")
        else:
            continue
        plain = " ".join(plain.split())
        if plain:
            return plain
    return ""


def title_from_message(text: str, *, max_chars: int) -> str:
    """Return the title a conversation gets from its first message ``text``: the
    plain text of its first paragraph (:func:`markdown_first_text`: "Tell me about
    **cats**" gives "Tell me about cats"), else its words as typed, at most
    ``max_chars`` characters: a longer one is cut at the last word boundary that
    leaves room for "…" (mid-word only when the first word alone is too long).
    Never empty: text with nothing visible gives "New chat". The rule: docs/chat.md,
    "Titles".
    """
    line = markdown_first_text(text) or " ".join(text[:TITLE_SOURCE_MAX_CHARS].split())
    if not line:
        return "New chat"
    if len(line) <= max_chars:
        return line
    cut = line[: max_chars - 1]
    if line[max_chars - 1] != " " and " " in cut:
        cut = cut.rsplit(" ", 1)[0]
    cut = cut.rstrip(_CUT_TRAILING) or line[: max_chars - 1]
    return cut + "…"
