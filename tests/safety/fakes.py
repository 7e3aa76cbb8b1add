"""A deterministic moderation backend for tests about the plumbing of moderation
(registered by dotted path: ``SAFETY_BACKEND = "tests.safety.fakes.KeywordClassifier"``).

It flags ``violence`` (0.97) in a text containing ``BOMB`` and ``fraud`` (0.6) in one
containing ``PHISH``; every call is recorded in :data:`CALLS`; while :data:`STATE`
``down`` is set it raises :class:`ModerationUnavailable` like a backend that is down.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from safety.categories import Category
from safety.classifiers.base import Classifier, ModerationUnavailable, Verdict

PATH = f"{__name__}.KeywordClassifier"
CALLS: list[str] = []
STATE: dict[str, Any] = {"down": False}


def reset() -> None:
    """Forget the calls; the backend is up."""
    CALLS.clear()
    STATE["down"] = False


class KeywordClassifier(Classifier):
    """See the module docstring."""

    name = "keyword"

    def classify(self, text: str, *, vector: Sequence[float] | None = None) -> Verdict:
        """Judge ``text`` by its keywords (see the module docstring)."""
        if STATE["down"]:
            raise ModerationUnavailable("the keyword backend is down")
        CALLS.append(text)
        scores = dict.fromkeys(Category, 0.0)
        if "BOMB" in text:
            scores[Category.VIOLENCE] = 0.97
        if "PHISH" in text:
            scores[Category.FRAUD] = 0.6
        return Verdict.from_scores(
            scores, thresholds=dict.fromkeys(Category, 0.5), backend=self.name
        )
