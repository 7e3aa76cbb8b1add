"""ids_removed reads a text in time linear in its length: one long word, a long run
of spaces before a trailing id, or a word naming an id followed by spaces cost what
ordinary text of that length costs (a 40,000-letter word held the web process's GIL
for 39 s: every pattern tried every start)."""

from __future__ import annotations

import time

import pytest

from safety.classifiers.features import ids_removed

SHAPES = {
    "one long word": lambda n: "w" * n,
    "letters and dashes": lambda n: "a-" * (n // 2),
    "letters and digits": lambda n: "a1" * (n // 2),
    "spaces before a trailing id": lambda n: "x" + " " * n + "y 12345",
    "a word naming an id, then spaces": lambda n: "order" + " " * n + "x",
}


def _seconds(text: str) -> float:
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        ids_removed(text)
        best = min(best, time.perf_counter() - start)
    return best


@pytest.mark.parametrize("shape", SHAPES)
def test_eight_times_the_text_costs_about_eight_times_not_sixty_four(shape):
    """Growth, not speed: 8x the length costs under 20x the time (linear: ~8x; the
    quadratic patterns took 40-64x), so a loaded machine slows both sides alike."""
    make = SHAPES[shape]
    small, large = _seconds(make(8_000)), _seconds(make(64_000))
    assert large < 20 * max(small, 1e-4), (shape, small, large)


def test_ids_are_still_cut_where_they_were():
    """The same spans as before: ids at either end take their separator along."""
    assert ids_removed("ID42: hello -- 884120") == "hello"
    assert ids_removed("text --  ticket 48") == "text"
    assert ids_removed("Order no. QZ-884 is late") == "is late"
    assert ids_removed("a token abc1234567def here") == "a token here"
    assert ids_removed("in 1984 the") == "in 1984 the"
