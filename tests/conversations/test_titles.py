"""The title policy (conversations/titles.py): the first-message title, and which
model-written title may replace it (issue 11). Table tests with the bad titles a tester saw, and
properties over generated text."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conversations import services
from conversations.models import Conversation, Message
from conversations.titles import (
    TITLE_MAX_CHARS,
    TITLE_MAX_WORDS,
    title_acceptable,
    title_from_message,
)
from inference.engines.llamacpp import LlamaCppEngine
from inference.engines.scripted import ScriptedEngine
from memory import summary as memory_summary
from memory.summary import (
    TITLE_RESPONSE_FORMAT,
    title_echoes_example,
    title_from_reply,
)

PLANETS_ANSWER = (
    "The two planets mentioned are Mars and Venus. Mars is the fourth planet from "
    "the Sun and Venus the second."
)


@pytest.mark.parametrize(
    ("title", "answer"),
    [
        ("105", "105"),  # seen: a number alone
        ("3.14", "Pi is about 3.14."),
        ("I'm glad to help.", "I'm glad to help. Here is how."),  # seen: a reply
        ("I’m happy to help", ""),  # curly apostrophe
        ("Sure, here it is", ""),
        ("Yes", ""),
        ("No, it is not", ""),
        ("The answer is 42", ""),
        ("Certainly! Let me explain", ""),
        ("Hello there", ""),
        ("Here's a summary", ""),
        ("The two planets mentione…", PLANETS_ANSWER),  # seen: a cut fragment
        ("The two planets mentioned", PLANETS_ANSWER),  # a fragment, even uncut
        ("Mars is the fourth planet", PLANETS_ANSWER),
        ("What is a quasar?", ""),  # a question, not a title
        ("Quasars explained...", ""),
        ("Quasars are distant galaxies.", ""),  # a sentence
        ("A title that is far too long to be a title for one chat at all", ""),
        ("One two three four five six seven eight nine", ""),  # 9 words
        ("1. Apple", "1. Apple\n2. Banana"),  # seen: a list item of the answer
        ("- Apples and pears", ""),
        ("## Fruit list", ""),
        ("| a | b |", ""),
        ("", ""),
        ("   ", ""),
    ],
)
def test_answers_fragments_and_sentences_are_not_titles(title, answer):
    assert not title_acceptable(title, answer=answer)


@pytest.mark.parametrize(
    ("title", "answer"),
    [
        ("Mars and Venus compared", PLANETS_ANSWER),
        ("Quasar basics", "A quasar is an extremely luminous active galactic nucleus."),
        ("Photosynthesis", "Photosynthesis turns light into chemical energy."),
        ("Green tea brewing", "Use water at 80 °C for two minutes."),
        ("Green tea brewing", "Green tea brewing takes two minutes at 80 °C."),
        ("Okra recipes", ""),  # starts like "ok" but is a word of its own
        ("Nobel prizes in 2024", ""),
        ("No-code tools overview", ""),
        ("Hello World in Python", ""),
        ("Great Barrier Reef facts", ""),
        ("Python 3.12 release notes", ""),
        ("Trip to Japan: 3 weeks", ""),
    ],
)
def test_short_real_titles_are_accepted(title, answer):
    assert title_acceptable(title, answer=answer)


_words = st.text(alphabet="abcdefghijklmnopqrstuvwxyz", min_size=1, max_size=9)


@given(st.lists(_words, min_size=1, max_size=20))
def test_an_accepted_title_is_short(words):
    title = " ".join(words).capitalize()
    if title_acceptable(title):
        assert len(title) <= TITLE_MAX_CHARS
        assert len(title.split()) <= TITLE_MAX_WORDS


@given(st.lists(_words, min_size=4, max_size=8), st.text(max_size=40))
def test_four_or_more_words_copied_from_the_answer_are_refused(words, before):
    title = " ".join(words)
    answer = f"{before} {title.upper()} and more."
    assert not title_acceptable(title, answer=answer)


@given(st.integers(min_value=0), st.sampled_from(["", ".", "?", "…", "!"]))
def test_a_number_alone_is_never_a_title(number, end):
    assert not title_acceptable(f"{number}{end}", answer="")


@given(
    st.lists(_words, min_size=1, max_size=5), st.sampled_from(["?", "…", ".", "..."])
)
def test_a_title_ending_like_a_sentence_or_cut_is_refused(words, end):
    assert not title_acceptable(" ".join(words).capitalize() + end, answer="")


# --- the first-message title (title_from_message) --------------------------------


@pytest.mark.parametrize(
    ("message", "title"),
    [
        (
            "Hello! Tell me three facts about **cats**\n\nAnd one about dogs.",
            "Hello! Tell me three facts about cats",
        ),
        (
            "Hello! Tell me three facts about **cats**, and why they sleep so much "
            "during the day?",
            "Hello! Tell me three facts about cats, and why they sleep…",
        ),
        ("# Trip *plans*\n\nthree weeks", "Trip plans"),
        ("- first _item_\n- second", "first item"),
        ("> quoted `code` here", "quoted code here"),
        (
            "[the docs](https://example.com/x) &amp; ![a chart](c.png)",
            "the docs & a chart",
        ),
        ("```python\n\nprint('hi')\n```\nwhy?", "print('hi')"),
        ("~~old~~ new\nplan", "old new plan"),
        ("Hi\nthere", "Hi there"),
        ("   hello   there  ", "hello there"),
        ("---", "---"),  # Markdown with no text: the words as typed
        (" \n\t ", "New chat"),
        ("x" * 80, "x" * 59 + "…"),  # one word too long: cut inside it
    ],
)
def test_the_first_message_title_is_its_first_paragraph_as_plain_text(message, title):
    assert title_from_message(message, max_chars=60) == title


def test_a_long_first_line_is_cut_at_a_word_boundary_with_an_ellipsis():
    message = "Plan a three-week trip through Japan with trains only, please, " * 3
    title = title_from_message(message, max_chars=60)
    assert title == "Plan a three-week trip through Japan with trains only…"
    assert len(title) <= 60 and message.startswith(title[:-1])


@given(st.text(max_size=300), st.integers(min_value=8, max_value=200))
def test_a_first_message_title_is_never_empty_or_too_long(message, max_chars):
    title = title_from_message(message, max_chars=max_chars)
    assert 0 < len(title) <= max_chars
    assert title == title.strip()


@given(st.lists(st.from_regex(r"[A-Za-z]{1,12}", fullmatch=True), min_size=1))
def test_a_cut_title_ends_at_a_word_boundary(words):
    message = " ".join(words)
    title = title_from_message(message, max_chars=40)
    if len(message) <= 40:
        assert title == message
    else:
        kept = title.removesuffix("…").split(" ")
        assert title.endswith("…") and len(title) <= 40
        if len(words[0]) < 40:
            assert kept == words[: len(kept)]


@pytest.mark.django_db
def test_a_new_chat_is_titled_by_its_first_message_without_markdown(start_worker, user):
    start_worker(ScriptedEngine(text="Sure! Cats sleep a lot."))
    turn = services.turn_start(
        user=user, content="Hello! Tell me three facts about **cats**\n\nThanks"
    )
    conversation = Conversation.objects.get(id=turn.conversation.id)
    assert conversation.title == "Hello! Tell me three facts about cats"


# --- The model's title: JSON under a schema, Markdown stripped ----------------------


@pytest.mark.parametrize(
    ("reply", "title"),
    [
        ('{"title": "Soft-boiled eggs"}', "Soft-boiled eggs"),
        ('{ "title": "  **Zip**   archives " }', "**Zip** archives"),
        ("Green tea brewing\nMore text", "Green tea brewing"),  # a plain-text engine
        ('"Quoted title"', "Quoted title"),  # JSON, but not an object: its text
        ('{"title": "A bogus \'-\'"}', "A bogus '-'"),
        ('{"name": "x"}', None),
        ('{"title": 5}', None),
        ("   ", None),
    ],
)
def test_the_title_is_read_from_the_models_json_reply(reply, title):
    assert title_from_reply(reply) == title


@pytest.mark.parametrize(
    ("title", "message", "echoes"),
    [
        ("Distribution of eggs", "how do I know which distribution I'm running?", 1),
        ("Soft skills", "What are soft skills?", 0),
        ("Boiled eggs", "How long do I boil eggs?", 0),
        ("Windows DLL version", "Where can I get a Windows DLL version?", 0),
    ],
)
def test_a_title_that_echoes_the_worked_example_is_refused(title, message, echoes):
    assert title_echoes_example(title, user_text=message) is bool(echoes)


class RecordingEngine(ScriptedEngine):
    """The scripted engine, keeping each job it was given."""

    def __init__(self, **options):
        super().__init__(**options)
        self.jobs = []

    async def generate(self, job):
        self.jobs.append(job)
        async for item in super().generate(job):
            yield item


def first_exchange(user, content, status=Message.Status.COMPLETE, answer=None):
    """A conversation with ``content`` as its first message and an answer (complete,
    unless ``status`` says otherwise)."""
    conversation = Conversation.objects.create(
        user=user, title=services.title_from_text(content)
    )
    question = Message.objects.create(
        conversation=conversation, role="user", content=content
    )
    Message.objects.create(
        conversation=conversation,
        role="assistant",
        parent=question,
        content="An answer of some length that says things."
        if answer is None
        else answer,
        status=status,
    )
    return conversation


@pytest.mark.django_db(transaction=True)
def test_the_model_is_asked_for_json_and_its_title_loses_its_markdown(
    start_worker, user, settings
):
    settings.MEMORY_SMALL_POOL = "titles"
    settings.MEMORY_GENERATION_TIMEOUT_S = 10
    engine = RecordingEngine(text='{"title": "Brewing **green** tea"}')
    start_worker(engine, pool="titles")
    conversation = first_exchange(user, "How hot should water be for *green* tea?")
    assert conversation.title == "How hot should water be for green tea?"
    assert services.conversation_title_generate(conversation_id=conversation.id) == (
        "Brewing green tea"
    )
    (job,) = engine.jobs
    assert job.params["response_format"] == TITLE_RESPONSE_FORMAT
    assert job.messages[-1]["content"].endswith(
        "How hot should water be for *green* tea?"
    )


@pytest.mark.django_db(transaction=True)
def test_a_first_answer_stopped_with_text_still_gets_a_title(
    start_worker, user, settings
):
    settings.MEMORY_SMALL_POOL = "titles"
    settings.MEMORY_GENERATION_TIMEOUT_S = 10
    start_worker(ScriptedEngine(text='{"title": "Green tea brewing"}'), pool="titles")
    stopped = first_exchange(
        user, "How hot should water be for green tea?", Message.Status.CANCELLED
    )
    assert services.conversation_title_generate(conversation_id=stopped.id) == (
        "Green tea brewing"
    )
    # stopped before any text: nothing to go on, the first-message title stays
    empty = first_exchange(
        user, "How long to steep black tea?", Message.Status.CANCELLED, answer=""
    )
    assert services.conversation_title_generate(conversation_id=empty.id) == (
        "How long to steep black tea?"
    )


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_the_embedded_model_writes_a_title_under_its_grammar(start_worker, user):
    """SmolLM2 (llama.cpp) under the title schema's grammar ends its reply itself
    with one short title; whatever it writes, the list never shows Markdown."""
    start_worker(LlamaCppEngine(n_ctx=2048))
    title = memory_summary.title_generate(
        user_text="Can zlib handle .zip archives?", pool="default", timeout_s=120
    )
    assert title and len(title) <= 60 and "\n" not in title
    conversation = first_exchange(
        user, "Why does `ps -aux` complain about a **bogus** '-'?"
    )
    services.conversation_title_generate(conversation_id=conversation.id)
    shown = Conversation.objects.get(id=conversation.id).title
    assert shown and not any(mark in shown for mark in ("`", "**", "#"))
