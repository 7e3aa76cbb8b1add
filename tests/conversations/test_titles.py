"""The title policy (conversations/titles.py): which model-written title may replace
the first-message title (issue 11). Table tests with the bad titles a tester saw, and
properties over generated text."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conversations.titles import TITLE_MAX_CHARS, TITLE_MAX_WORDS, title_acceptable

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
