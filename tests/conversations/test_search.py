"""Full-text search over conversation titles and messages (conversations/search.py,
the generated search columns of migration 0006, the /search/ page), against the
real PostgreSQL."""

from __future__ import annotations

import datetime as dt
import io

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import CommandError, call_command
from django.db import connection
from django.test import Client
from django.urls import reverse

from chatsite.errors import InvalidInput
from conversations import search_sql, services
from conversations.models import Conversation, Message
from conversations.search import conversation_search, prefix_tsquery

pytestmark = pytest.mark.django_db


def chat(user, title, *texts):
    """A conversation of ``user``: alternating user/assistant messages ``texts``."""
    conv = Conversation.objects.create(user=user, title=title)
    question = None
    out = []
    for i, text in enumerate(texts):
        if i % 2 == 0:
            question = Message.objects.create(
                conversation=conv, role=Message.Role.USER, content=text
            )
            out.append(question)
        else:
            out.append(
                Message.objects.create(
                    conversation=conv,
                    role=Message.Role.ASSISTANT,
                    parent=question,
                    content=text,
                )
            )
    return conv, out


def message_hits(results):
    return [r.message_id for r in results if r.message_id]


def test_search_finds_a_message_by_a_stemmed_word_and_highlights_it(user):
    conv, (question, answer) = chat(
        user,
        "Travel",
        "Where should I go hiking?",
        "The Dolomites have wonderful hiking trails in summer.",
    )
    results = conversation_search(user=user, query="trail")
    assert message_hits(results) == [answer.id]
    hit = results[0]
    assert "<mark>trails</mark>" in hit.snippet
    assert hit.url == f"/c/{conv.id}/#m-{answer.id}"
    assert str(hit.title) == "Travel"


def test_only_the_requesting_users_rows_are_searched(user, other_user):
    chat(other_user, "Secret volcano plans", "volcano lair budget", "volcano ok")
    assert conversation_search(user=user, query="volcano") == []
    assert conversation_search(user=other_user, query="volcano")


def test_html_in_a_message_is_escaped_in_the_snippet_but_marks_are_real(user):
    chat(
        user,
        "<b>bold</b> title",
        "please explain <script>alert('pwned')</script> tags",
        "A <mark>fake</mark> mark and script tags explained",
    )
    results = conversation_search(user=user, query="script")
    snippets = " ".join(str(r.snippet) for r in results)
    assert "<script>" not in snippets
    assert "&lt;<mark>script</mark>&gt;alert(&#x27;pwned&#x27;)" in snippets
    titles = " ".join(str(r.title) for r in results)
    assert "&lt;b&gt;bold&lt;/b&gt; title" in titles
    fake = conversation_search(user=user, query="fake")
    assert "&gt;<mark>fake</mark>&lt;/mark&gt; mark" in str(fake[0].snippet)


def test_websearch_syntax_exact_phrase_and_excluded_word(user):
    _c, (phrase, _a) = chat(user, "One", "the quick brown fox jumps", "ok")
    _c, (scrambled, _b) = chat(user, "Two", "brown is the quick fox", "fine")
    _c, (with_dog, _d) = chat(user, "Three", "quick brown fox and a lazy dog", "ok")
    exact = conversation_search(user=user, query='"quick brown fox"')
    assert set(message_hits(exact)) == {phrase.id, with_dog.id}
    without = conversation_search(user=user, query='"quick brown fox" -dog')
    assert message_hits(without) == [phrase.id]
    either = conversation_search(user=user, query="lazy or scrambled brown")
    assert with_dog.id in message_hits(either)
    assert scrambled.id not in message_hits(without)


def test_rename_updates_the_title_search(user):
    conv, _ = chat(user, "Untitled chat", "hello", "hi there")
    assert conversation_search(user=user, query="gardening") == []
    services.conversation_rename(
        user=user, conversation_id=conv.id, title="Gardening tips"
    )
    results = conversation_search(user=user, query="gardening")
    assert [(r.conversation_id, r.message_id) for r in results] == [(conv.id, None)]
    assert "<mark>Gardening</mark> tips" == str(results[0].title)
    assert results[0].url == f"/c/{conv.id}/"


def test_an_answer_becomes_searchable_when_its_stream_finishes(user):
    conv, (question,) = chat(user, "Streaming", "tell me about comets")
    answer = Message.objects.create(
        conversation=conv,
        role=Message.Role.ASSISTANT,
        parent=question,
        status=Message.Status.STREAMING,
    )
    assert conversation_search(user=user, query="nucleus") == []
    # the finalising write path is a plain update of content and status
    Message.objects.filter(id=answer.id).update(
        content="A comet has an icy nucleus.", status=Message.Status.COMPLETE
    )
    assert message_hits(conversation_search(user=user, query="nucleus")) == [answer.id]


def test_title_matches_come_first_then_messages_by_rank(user):
    title_conv, _ = chat(user, "Sourdough starter", "hello", "hi")
    _c, (_q, once) = chat(user, "Bread", "how to bake", "Use a sourdough loaf tin.")
    _c, (often, _a) = chat(
        user, "More bread", "sourdough sourdough sourdough, why sourdough?", "yes"
    )
    results = conversation_search(user=user, query="sourdough")
    assert results[0].conversation_id == title_conv.id and results[0].message_id is None
    assert message_hits(results) == [often.id, once.id]


@pytest.mark.parametrize("query", ["x" * 201, "nul\x00byte"])
def test_a_too_long_or_nul_query_is_refused_with_a_reason(user, query):
    with pytest.raises(InvalidInput) as caught:
        conversation_search(user=user, query=query)
    assert caught.value.code in {"query_too_long", "invalid_character"}


@pytest.mark.parametrize("query", ["", "   ", None])
def test_a_blank_query_returns_the_recent_conversations_newest_first(user, query):
    older, _ = chat(user, "Older <b>chat</b>", "hello", "hi")
    newer, _ = chat(user, "Newer chat", "hello again", "hi again")
    Conversation.objects.filter(id=older.id).update(
        updated_at=newer.updated_at - dt.timedelta(hours=1)
    )
    results = conversation_search(user=user, query=query)
    assert [r.conversation_id for r in results] == [newer.id, older.id]
    assert [r.message_id for r in results] == [None, None]
    assert str(results[1].title) == "Older &lt;b&gt;chat&lt;/b&gt;"
    assert len(conversation_search(user=user, query=query, limit=1)) == 1


def test_a_title_is_found_by_the_start_of_a_word(user):
    conv, _ = chat(user, "Untitled chat", "hello", "hi")
    services.conversation_rename(
        user=user, conversation_id=conv.id, title="zebrafishwombat"
    )
    results = conversation_search(user=user, query="zebrafish")
    assert [(r.conversation_id, r.message_id) for r in results] == [(conv.id, None)]
    assert str(results[0].title) == "<mark>zebrafishwombat</mark>"


def test_a_message_is_found_by_the_start_of_a_word_and_highlighted(user):
    _c, (question, _a) = chat(user, "Animals", "what is a quokkaplatypus?", "unknown")
    results = conversation_search(user=user, query="quokka")
    assert message_hits(results) == [question.id]
    assert "<mark>quokkaplatypus</mark>" in str(results[0].snippet)


def test_a_word_whose_stem_differs_still_finds_longer_words(user):
    # english stems "happy" to 'happi', not a prefix of the stored 'happyland'; the
    # word as typed is a prefix too; the stem still finds "happiness"
    _c, (land, _a) = chat(user, "Parks", "a day at happyland", "fun")
    _c, (joy, _b) = chat(user, "Mood", "what is happiness", "a feeling")
    assert set(message_hits(conversation_search(user=user, query="happy"))) == {
        land.id,
        joy.id,
    }


def test_prefixes_keep_phrases_exclusion_and_or(user):
    _c, (fox, _a) = chat(user, "One", "the quick brownish fox", "ok")
    _c, (dog, _b) = chat(user, "Two", "quick brownish fox and dogfood", "ok")
    _c, (cat, _d) = chat(user, "Three", "a catamaran", "ok")
    assert set(message_hits(conversation_search(user=user, query='"quick brown"'))) == {
        fox.id,
        dog.id,
    }
    assert message_hits(conversation_search(user=user, query='"quick brown" -dog')) == [
        fox.id
    ]
    either = conversation_search(user=user, query="dogf or catam")
    assert set(message_hits(either)) == {dog.id, cat.id}
    assert conversation_search(user=user, query='"brown quick"') == []


@pytest.mark.parametrize(
    "query",
    [
        "zebra'fish",
        "zebra\\fish",
        "zebra:* & | ! ( ) <-> <2> fish",
        "'",
        '"',
        "''",
        "\\",
        ":*",
        "!(",
        "a'b\\'c",
        "zebra:A*",
        "&|!():*<>",
        "' | 'x",
        "'zebra':* | 'a'",
    ],
)
def test_tsquery_syntax_in_the_query_is_only_text(user, query):
    chat(user, "zebrafishwombat", "the zebra and the fish", "ok")
    results = conversation_search(user=user, query=query)  # never raises
    for result in results:
        assert result.conversation_id


def test_a_quote_in_the_query_cannot_widen_it_into_an_or(user):
    chat(user, "Secret", "nothing here", "ok")
    # were the quote tsquery syntax, "' | 'nothing" would match every message
    assert conversation_search(user=user, query="zzz' | 'nothing") == []


def test_the_prefix_query_is_built_from_postgresqls_lexemes():
    assert prefix_tsquery(text="zebrafish", config="english") == "'zebrafish':*"
    assert prefix_tsquery(text="happy -dogs", config="english") == (
        "('happi':* | 'happy':*) & !('dog':* | 'dogs':*)"
    )
    # a stop word dropped: the stemmed reading alone
    assert prefix_tsquery(text="the happy", config="english") == "'happi':*"
    assert prefix_tsquery(text="the", config="english") == ""
    assert prefix_tsquery(text="it's", config="english") == ""
    assert prefix_tsquery(text="o'neil", config="english") == ("'o':* <-> 'neil':*")


def test_the_prefix_query_uses_the_gin_indexes(user):
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        for table in ("conversations_message", "conversations_conversation"):
            cursor.execute(
                f"EXPLAIN SELECT id FROM {table} WHERE search_vector @@ "  # noqa: S608
                "(%s)::tsquery",
                [prefix_tsquery(text="zebra happy", config="english")],
            )
            plan = " ".join(row[0] for row in cursor.fetchall())
            assert "_search_gin" in plan, plan


def test_a_query_of_stop_words_only_matches_nothing(user):
    chat(user, "The end", "the the the", "and the")
    assert conversation_search(user=user, query="the") == []


def test_the_columns_are_generated_with_the_configured_search_config(user):
    expressions = search_sql.columns_config(connection=connection)
    assert set(expressions) == {"conversations_message", "conversations_conversation"}
    for expression in expressions.values():
        assert "'english'::regconfig" in expression
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexdef FROM pg_indexes WHERE indexname IN "
            "('msg_search_gin', 'conv_search_gin')"
        )
        assert all("gin (search_vector)" in r[0] for r in cursor.fetchall())


def test_search_page_lists_results_and_links_to_the_message(auth_client, user):
    conv, (_q, answer) = chat(user, "Astronomy", "what is a quasar", "A <quasar> is…")
    response = auth_client.get(reverse("conversation-search"), {"q": "quasar"})
    assert response.status_code == 200
    html = response.content.decode()
    assert html.count('<li class="search-result') == 2
    assert f'href="/c/{conv.id}/#m-{answer.id}"' in html
    assert "A &lt;<mark>quasar</mark>&gt; is…" in html


@pytest.mark.parametrize("params", [{"q": "  "}, {}])
def test_search_page_lists_recent_chats_for_an_empty_query(auth_client, user, params):
    conv, _ = chat(user, "Recent travel plans", "hello", "hi")
    response = auth_client.get(reverse("conversation-search"), params)
    assert response.status_code == 200
    html = response.content.decode()
    assert "Recent chats" in html
    assert f'href="/c/{conv.id}/"' in html and "Recent travel plans" in html
    assert "No results" not in html and "Title match" not in html


def test_search_page_says_why_a_too_long_query_is_refused(auth_client):
    response = auth_client.get(reverse("conversation-search"), {"q": "x" * 201})
    assert response.status_code == 400
    assert "at most 200 characters" in response.content.decode()
    assert "search-result" not in response.content.decode()


def test_search_page_shows_nothing_of_another_user(user, other_user):
    chat(user, "Private diary", "my private diary entry", "noted")
    client = Client()
    client.force_login(other_user)
    response = client.get(reverse("conversation-search"), {"q": "diary"})
    assert response.status_code == 200
    assert "Private diary" not in response.content.decode()
    assert "No results" in response.content.decode()


def test_the_chat_page_has_a_labelled_search_box_and_message_anchors(auth_client, user):
    conv, (question, _a) = chat(user, "Anchors", "hello", "hi")
    html = auth_client.get(reverse("conversation-detail", args=[conv.id])).content
    html = html.decode()
    assert '<form id="search"' in html and 'name="q"' in html
    assert '<label for="search-q"' in html
    assert f'id="m-{question.id}"' in html


def test_search_config_apply_regenerates_the_columns_with_the_setting(user, settings):
    # DDL is transactional in PostgreSQL: the test's rollback restores 'english'
    chat(user, "Moods", "I felt happiness all day", "ok")
    assert conversation_search(user=user, query="happy")  # english stems: 'happi'
    with connection.cursor() as cursor:
        # check the inserts' deferred foreign keys now: ALTER TABLE refuses to run
        # with pending trigger events (the command runs in a fresh transaction)
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
    settings.CHAT_SEARCH_CONFIG = "simple"
    with pytest.raises(CommandError, match="does not use 'simple'"):
        call_command("search_config_apply", "--check")
    out = io.StringIO()
    call_command("search_config_apply", stdout=out)
    assert "now use 'simple'" in out.getvalue()
    expressions = search_sql.columns_config(connection=connection)
    assert all("'simple'::regconfig" in e for e in expressions.values())
    assert conversation_search(user=user, query="happy") == []  # no stemming now
    assert conversation_search(user=user, query="happiness")
    call_command("search_config_apply", "--check", stdout=io.StringIO())


@pytest.mark.parametrize("name", ["nope", "english'; drop table x; --"])
def test_an_unknown_search_config_is_refused(settings, name):
    settings.CHAT_SEARCH_CONFIG = name
    with pytest.raises(ImproperlyConfigured):
        search_sql.search_config(connection=connection)
