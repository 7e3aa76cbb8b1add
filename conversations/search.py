"""Full-text search over the user's conversation titles and messages (a read).

PostgreSQL full-text search on the generated ``search_vector`` columns
(conversations/search_sql.py) and their GIN indexes: the query is read by
``websearch_to_tsquery`` (so ``"exact phrase"``, ``-word`` and ``or`` work as in a
web search engine, and no input is a syntax error), then every word is made a
prefix (:func:`prefix_tsquery`), ranked by ``ts_rank``, with ``ts_headline``
snippets. Only the requesting user's rows are searched; a blank query lists the
user's recent conversations.
"""

from __future__ import annotations

import datetime as dt
import re
import secrets
import uuid
from dataclasses import dataclass
from html import unescape as html_unescape
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.contrib.postgres.search import SearchHeadline, SearchQuery, SearchRank
from django.db import connection
from django.db.models import F, Value
from django.db.models.functions import Replace
from django.urls import reverse
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from chatsite.errors import InvalidInput
from conversations.models import Conversation, Message
from conversations.selectors import conversation_list

# ts_headline options of message snippets: one passage of 15-35 words around the
# best match (a short message whole). Fragment mode (MaxFragments > 0) cut short
# messages down to the matched word alone.
SNIPPET_OPTIONS = {"max_words": 35, "min_words": 15}


@dataclass(frozen=True)
class SearchResult:
    """One hit: a message (``message_id`` set) or a conversation title (None).

    ``title`` and ``snippet`` are HTML: escaped text with ``<mark>`` around the
    matched words. ``rank`` is PostgreSQL's ``ts_rank`` (comparable within a kind).
    """

    conversation_id: uuid.UUID
    title: SafeString
    snippet: SafeString
    created_at: dt.datetime
    rank: float
    message_id: uuid.UUID | None = None
    role: str = ""

    @property
    def url(self) -> str:
        """The conversation page, opened at the message when the hit is a message."""
        url = reverse("conversation-detail", args=[self.conversation_id])
        return f"{url}#m-{self.message_id}" if self.message_id else url


def search_query_clean(query: Any) -> str:
    """Return the query stripped (``""`` when it is blank or not a string); raise
    InvalidInput when it is over CHAT_SEARCH_MAX_QUERY_CHARS characters or holds a
    NUL character."""
    text = query.strip() if isinstance(query, str) else ""
    limit = settings.CHAT_SEARCH_MAX_QUERY_CHARS
    if len(text) > limit:
        raise InvalidInput(
            f"A search can be at most {limit} characters long "
            f"(this one has {len(text):,}).",
            code="query_too_long",
        )
    if "\x00" in text:
        raise InvalidInput(
            "The search contains a NUL character (\\0).", code="invalid_character"
        )
    return text


# A lexeme in tsquery's text output: quoted, a quote inside it doubled (``''``).
_LEXEME = re.compile(r"'(?:[^']|'')*'")


def prefix_tsquery(*, text: str, config: str) -> str:
    """Return the tsquery (its text form) of ``text`` with every word a prefix, or
    ``""`` when no word is left (stop words only, punctuation).

    PostgreSQL's ``websearch_to_tsquery`` reads ``text`` (phrases, ``-word``, ``or``;
    it never raises, so quotes, ``&|!():*<>`` or backslashes typed are only text) once
    under ``config`` (stemmed, stop words dropped) and once under ``simple`` (the
    words as typed, lower-cased); each lexeme ``'w'`` becomes ``'w':*``. When both
    readings have the same operators (no stop word dropped), each word matches either
    prefix, ``('happi':* | 'happy':*)``: the stemmed one finds "happiness", the typed
    one "happyland" (a stored word is stemmed whole, so the stem of a prefix is not
    always a prefix of its stem). Otherwise the stemmed reading alone is used. The
    lexemes come back from PostgreSQL already quoted, and the result is cast with
    ``::tsquery`` (no second normalisation), so user input never becomes tsquery
    syntax. One query to the database.
    """
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT websearch_to_tsquery(%s::regconfig, %s)::text, "
            "websearch_to_tsquery('simple'::regconfig, %s)::text",
            [config, text, text],
        )
        stemmed, typed = cursor.fetchone()
    words = _LEXEME.findall(stemmed)
    operators = _LEXEME.split(stemmed)
    typed_words = _LEXEME.findall(typed)
    if _LEXEME.split(typed) != operators:
        typed_words = words
    parts = [operators[0]]
    for word, typed_word, after in zip(words, typed_words, operators[1:], strict=True):
        prefix = f"{word}:*"
        if typed_word != word:
            prefix = f"({prefix} | {typed_word}:*)"
        parts += [prefix, after]
    return "".join(parts).strip()


class TsQuery(SearchQuery):
    """A tsquery given in its text form (:func:`prefix_tsquery`), cast as it is:
    its lexemes are not normalised again (``to_tsquery`` would stem the stems)."""

    template = "(%(expressions)s)::tsquery"

    def __init__(self, text: str) -> None:
        super().__init__(Value(text))


def escaped_text(column: str) -> Replace:
    """Return ``column`` HTML-escaped (``&``, ``<``, ``>``) by the database.

    ts_headline is given escaped text because on raw text PostgreSQL's parser takes
    ``<script>`` for a tag and leaves it out of the snippet; escaped, it is text that
    shows as typed. :meth:`_Marks.html` unescapes the headline (the exact inverse)
    before escaping it again in Python, so the escaping that counts is Django's.
    """
    text: Any = F(column)
    for raw, entity in (("&", "&amp;"), ("<", "&lt;"), (">", "&gt;")):
        text = Replace(text, Value(raw), Value(entity))
    return text


class _Marks:
    """Highlight sentinels for ts_headline that cannot occur in stored text.

    A fresh random token per search (80 bits, letters and digits only, so
    ts_headline's option parser and HTML escaping leave it intact): the headline is
    escaped whole, then only the sentinels become ``<mark>``/``</mark>``, so text in a
    message such as ``<mark>`` or ``<script>`` stays text.
    """

    def __init__(self) -> None:
        token = secrets.token_hex(10)
        self.start, self.stop = f"hl{token}s", f"hl{token}e"

    def html(self, headline: str) -> SafeString:
        """Return ``headline`` of :func:`escaped_text` as HTML with ``<mark>``s."""
        escaped = str(escape(html_unescape(headline)))
        return mark_safe(  # noqa: S308 - escaped above; only our own tags added
            escaped.replace(self.start, "<mark>").replace(self.stop, "</mark>")
        )


def conversation_search(
    *, user: User, query: Any, limit: int | None = None
) -> list[SearchResult]:
    """Return the user's matches for ``query`` (web-search syntax, every word a
    prefix: :func:`prefix_tsquery`), best first.

    Conversation titles that match come first (they link to the conversation), then
    messages by rank, newest first among equals; at most ``limit`` (default
    CHAT_SEARCH_RESULTS) of each kind. A blank query returns the user's most recently
    active conversations instead (at most ``limit``, rank 0, no snippet), so an empty
    search shows recent chats. Raises InvalidInput (see :func:`search_query_clean`).
    A query of stop words only matches nothing.
    """
    # ``<``/``>`` as spaces, as in the indexed text (search_sql.vector_sql)
    text = search_query_clean(query).replace("<", " ").replace(">", " ")
    limit = limit or settings.CHAT_SEARCH_RESULTS
    if not text:
        return [
            SearchResult(
                conversation_id=conv_id,
                title=escape(title),
                snippet=mark_safe(""),
                created_at=updated_at,
                rank=0.0,
            )
            for conv_id, title, updated_at in conversation_list(user=user).values_list(
                "id", "title", "updated_at"
            )[:limit]
        ]
    config = settings.CHAT_SEARCH_CONFIG
    prefixes = prefix_tsquery(text=text, config=config)
    if not prefixes:
        return []
    tsquery = TsQuery(prefixes)
    marks = _Marks()

    def headline(column: str, **options: Any) -> SearchHeadline:
        return SearchHeadline(
            escaped_text(column),
            tsquery,
            config=config,
            start_sel=marks.start,
            stop_sel=marks.stop,
            **options,
        )

    titles = (
        Conversation.objects.filter(user=user, search_vector=tsquery)
        .annotate(
            rank=SearchRank(F("search_vector"), tsquery),
            headline=headline("title", highlight_all=True),
        )
        .order_by("-rank", "-updated_at")
        .values_list("id", "headline", "updated_at", "rank")[:limit]
    )
    results = [
        SearchResult(
            conversation_id=conv_id,
            title=marks.html(title),
            snippet=mark_safe(""),
            created_at=updated_at,
            rank=rank,
        )
        for conv_id, title, updated_at, rank in titles
    ]
    # Rank first, snippets second: ts_headline re-parses a message's whole text, so
    # it runs only on the rows shown, not on every match.
    hits = list(
        Message.objects.filter(conversation__user=user, search_vector=tsquery)
        .annotate(rank=SearchRank(F("search_vector"), tsquery))
        .order_by("-rank", "-created_at")
        .values_list(
            "id", "conversation_id", "conversation__title", "role", "created_at", "rank"
        )[:limit]
    )
    snippets = dict(
        Message.objects.filter(id__in=[hit[0] for hit in hits])
        .annotate(snippet=headline("content", **SNIPPET_OPTIONS))
        .values_list("id", "snippet")
    )
    results += [
        SearchResult(
            conversation_id=conv_id,
            title=escape(title),
            snippet=marks.html(snippets.get(message_id, "")),
            created_at=created_at,
            rank=rank,
            message_id=message_id,
            role=role,
        )
        for message_id, conv_id, title, role, created_at, rank in hits
    ]
    return results
