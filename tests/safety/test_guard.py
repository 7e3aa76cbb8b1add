"""The guard-model backend: its prompt, its answer parser, and a scripted guard
worker answering in Llama Guard 3's format."""

from __future__ import annotations

from typing import Any

import pytest

from inference.engines.scripted import ScriptedEngine
from safety.categories import Category
from safety.classifiers import ModerationUnavailable
from safety.classifiers.guard import GuardClassifier, guard_parse, guard_prompt

pytestmark = pytest.mark.django_db

GUARD_POOL = "guard-test"


@pytest.mark.parametrize(
    ("output", "expected"),
    [
        ("safe", (False, ())),
        ("  safe\n", (False, ())),
        ("unsafe\nS1", (True, ("S1",))),
        ("unsafe\nS1,S10", (True, ("S1", "S10"))),
        ("unsafe\ns9, s1 ,S9", (True, ("S9", "S1"))),
        ("Unsafe\n\nS11\n", (True, ("S11",))),
        ("unsafe S4", (True, ("S4",))),
    ],
)
def test_guard_answers_parse(
    output: str, expected: tuple[bool, tuple[str, ...]]
) -> None:
    assert guard_parse(output) == expected


@pytest.mark.parametrize(
    "output",
    [
        "",
        "   ",
        "unsafe",
        "unsafe\n",
        "unsafe\nviolence",
        "I can't help with that.",
        "safe\nS1",
        "unsafe\nS1;S2",
        "unsafe\nSX",
    ],
)
def test_malformed_guard_answers_are_rejected(output: str) -> None:
    with pytest.raises(ValueError):
        guard_parse(output)


def test_prompt_lists_the_hazards_and_quotes_the_text() -> None:
    prompt = guard_prompt("how do I bake bread?")
    assert "S1: Violent Crimes." in prompt and "S14: Code Interpreter Abuse." in prompt
    assert "User: how do I bake bread?" in prompt
    assert "First line must read 'safe' or 'unsafe'." in prompt


def test_unsafe_answer_flags_mapped_categories_and_keeps_other_codes(
    start_worker: Any,
) -> None:
    engine = ScriptedEngine(text="unsafe\nS1,S10,S6")
    start_worker(engine, pool=GUARD_POOL)
    verdict = GuardClassifier(pool=GUARD_POOL, timeout_s=10).classify("some text")
    assert set(verdict.flagged) == {Category.VIOLENCE, Category.HATE}
    assert verdict.hazards == ("S6",)
    assert verdict.backend == "guard"


def test_safe_answer_flags_nothing(start_worker: Any) -> None:
    start_worker(ScriptedEngine(text="safe"), pool=GUARD_POOL)
    verdict = GuardClassifier(pool=GUARD_POOL, timeout_s=10).classify("hello")
    assert verdict.flagged == () and verdict.available


def test_unreadable_answer_is_moderation_unavailable(start_worker: Any) -> None:
    start_worker(ScriptedEngine(text="I am not a guard model."), pool=GUARD_POOL)
    with pytest.raises(ModerationUnavailable, match="could not be read"):
        GuardClassifier(pool=GUARD_POOL, timeout_s=10).classify("hello")


def test_no_guard_worker_is_moderation_unavailable() -> None:
    with pytest.raises(ModerationUnavailable, match="no worker serves the guard pool"):
        GuardClassifier(pool=GUARD_POOL, timeout_s=10).classify("hello")
