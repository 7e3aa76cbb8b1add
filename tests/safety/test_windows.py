"""The window of the last user turns (safety/windows.py): judged on its joined text
with the mean of its turns' own vectors, which earlier turns kept, so it embeds no text
of its own."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from safety import verdicts, windows
from safety.categories import Category
from safety.classifiers.base import Classifier, Verdict


class VectorSpy(Classifier):
    """Reads vectors; records what it was given; scores ``weapons`` at ``score``
    (flagged from 0.5)."""

    name = "vector-spy"
    uses_vector = True

    def __init__(self, score: float = 0.0) -> None:
        self.seen: list[tuple[str, Sequence[float] | None]] = []
        self.score = score

    def classify(self, text: str, *, vector: Sequence[float] | None = None) -> Verdict:
        self.seen.append((text, vector))
        return Verdict.from_scores(
            {**dict.fromkeys(Category, 0.0), Category.WEAPONS: self.score},
            thresholds=dict.fromkeys(Category, 0.5),
            backend=self.name,
        )


def _unit(seed: int) -> list[float]:
    v = np.random.default_rng(seed).normal(size=384)
    return (v / np.linalg.norm(v)).tolist()


def _turns(n: int) -> list[str]:
    tag = uuid.uuid4().hex[:8]
    return [f"Turn {i} of conversation {tag}." for i in range(n)]


def test_window_turns_are_the_last_user_messages_stripped_and_none_for_one():
    messages = [
        {"role": "user", "content": " one "},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": ""},
        {"role": "user", "content": "two"},
        {"role": "user", "content": "three"},
    ]
    assert windows.window_turns(messages, turns=2) == ["two", "three"]
    assert windows.window_turns(messages, turns=3) == ["one", "two", "three"]
    assert windows.window_turns(messages, turns=1) is None
    assert windows.window_turns(messages[:2], turns=3) is None
    assert windows.window_text(messages, turns=2) == "two\nthree"


def test_a_window_is_judged_with_the_mean_of_its_turns_kept_vectors(settings):
    settings.SAFETY_WINDOW_VECTOR_S = 60
    first, second, newest = _turns(3)
    kept = {first: _unit(1), second: _unit(2)}
    verdicts.vectors_exchange(store=kept, fetch=[])
    spy = VectorSpy()
    # no embedding worker runs: a text it had to embed would fail
    verdict = windows.window_judge(
        turns=[first, second, newest], classifier=spy, known={newest: _unit(3)}
    )
    assert verdict.available
    [(text, vector)] = spy.seen
    assert text == f"{first}\n{second}\n{newest}"
    mean = np.mean([_unit(1), _unit(2), _unit(3)], axis=0)
    np.testing.assert_allclose(vector, mean / np.linalg.norm(mean), atol=1e-5)
    # the newest turn's vector is kept for the next turn's window
    assert verdicts.vectors_exchange(store={}, fetch=[newest])[0] is not None


def test_a_first_turn_keeps_its_vector_for_the_next_window(settings):
    settings.SAFETY_WINDOW_VECTOR_S = 60
    first, second = _turns(2)
    windows.turn_keep({first: _unit(4)})
    spy = VectorSpy()  # no embedding worker runs: a text it had to embed would fail
    verdict = windows.window_judge(
        turns=[first, second], classifier=spy, known={second: _unit(5)}
    )
    assert verdict.available and len(spy.seen) == 1
    settings.SAFETY_WINDOW_TURNS = 1  # no window: nothing kept
    windows.turn_keep({"Another first turn.": _unit(6)})
    assert verdicts.vectors_exchange(store={}, fetch=["Another first turn."]) == [None]


def test_a_turn_whose_vector_was_not_kept_is_embedded_once_and_then_kept(
    embedding_worker, settings, monkeypatch
):
    settings.SAFETY_WINDOW_VECTOR_S = 60
    embedded: list[list[str]] = []
    original = windows.embed_texts

    def spy(texts: Any, **options: Any) -> Any:
        embedded.append(list(texts))
        return original(texts, **options)

    monkeypatch.setattr(windows, "embed_texts", spy)
    first, second, third = _turns(3)
    classifier = VectorSpy()
    windows.window_judge(
        turns=[first, second], classifier=classifier, known={second: _unit(6)}
    )
    assert embedded == [[first]]
    windows.window_judge(
        turns=[first, second, third], classifier=classifier, known={third: _unit(7)}
    )
    assert embedded == [[first]]
    assert all(len(v or ()) == 384 for _, v in classifier.seen)


def test_without_kept_vectors_every_earlier_turn_is_embedded(
    embedding_worker, settings, monkeypatch
):
    settings.SAFETY_WINDOW_VECTOR_S = 0
    embedded: list[list[str]] = []
    original = windows.embed_texts
    monkeypatch.setattr(
        windows, "embed_texts", lambda t, **o: embedded.append(list(t)) or original(t)
    )
    first, second, third = _turns(3)
    windows.window_judge(
        turns=[first, second, third], classifier=VectorSpy(), known={third: _unit(8)}
    )
    assert embedded == [[first, second]]
    assert verdicts.vectors_exchange(store={}, fetch=[third]) == [None]


def test_no_vectors_make_no_window_vector():
    with pytest.raises(ValueError):
        windows.window_vector([])


def test_a_window_near_a_category_on_the_mean_is_embedded_and_judged_again(
    embedding_worker, settings, monkeypatch
):
    settings.SAFETY_WINDOW_VECTOR_S = 60
    settings.SAFETY_WINDOW_EMBED_FROM = 0.2
    embedded: list[list[str]] = []
    original = windows.embed_texts
    monkeypatch.setattr(
        windows, "embed_texts", lambda t, **o: embedded.append(list(t)) or original(t)
    )
    first, second = _turns(2)
    windows.turn_keep({first: _unit(9)})
    below = VectorSpy(score=0.1)
    windows.window_judge(
        turns=[first, second], classifier=below, known={second: _unit(10)}
    )
    assert embedded == [] and len(below.seen) == 1
    near = VectorSpy(score=0.3)
    windows.window_judge(
        turns=[first, second], classifier=near, known={second: _unit(10)}
    )
    assert embedded == [[f"{first}\n{second}"]]
    (_, mean), (_, own) = near.seen
    assert len(own or ()) == 384 and not np.allclose(mean, own)  # its own embedding
