"""Full-text search over the user's conversation titles and messages (a read).

PostgreSQL full-text search on the generated ``search_vector`` columns
(conversations/search_sql.py): ``websearch_to_tsquery`` (so ``"exact phrase"``,
``-word`` and ``or`` work as in a web search engine), ranked by ``ts_rank``, with
``ts_headline`` snippets. Only the requesting user's rows are searched.
"""

from __future__ import annotations

import datetime as dt
import secrets
import uuid
from dataclasses import dataclass
from html import unescape as html_unescape
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.contrib.postgres.search import SearchHeadline, SearchQuery, SearchRank
from django.db.models import F, Value
from django.db.models.functions import Replace
from django.urls import reverse
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from chatsite.errors import InvalidInput
from conversations.models import Conversation, Message

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
    """Return the query stripped; raise InvalidInput when it is empty, over
    CHAT_SEARCH_MAX_QUERY_CHARS characters, or holds a NUL character."""
    text = query.strip() if isinstance(query, str) else ""
    if not text:
        raise InvalidInput("Type a word or phrase to search for.", code="empty_query")
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
    """Return the user's matches for ``query`` (web-search syntax), best first.

    Conversation titles that match come first (they link to the conversation), then
    messages by rank, newest first among equals; at most ``limit`` (default
    CHAT_SEARCH_RESULTS) of each kind. Raises InvalidInput (see
    :func:`search_query_clean`). A query of stop words only matches nothing.
    """
    # ``<``/``>`` as spaces, as in the indexed text (search_sql.vector_sql)
    text = search_query_clean(query).replace("<", " ").replace(">", " ")
    limit = limit or settings.CHAT_SEARCH_RESULTS
    config = settings.CHAT_SEARCH_CONFIG
    tsquery = SearchQuery(text, search_type="websearch", config=config)
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
