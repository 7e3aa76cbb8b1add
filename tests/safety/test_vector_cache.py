"""Vectors kept between training runs (safety.classifiers.vector_cache)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from safety.classifiers.vector_cache import vectors_cached


def test_a_second_run_embeds_only_the_texts_the_cache_lacks(tmp_path: Path) -> None:
    asked: list[list[str]] = []

    def embed(texts: list[str]) -> np.ndarray:
        asked.append(texts)
        return np.array([[len(t), 1.0] for t in texts])

    path = tmp_path / "cache.npz"
    first = vectors_cached(["ab", "abc", "ab"], embed, path=path)
    second = vectors_cached(["abc", "abcd"], embed, path=path)
    assert asked == [["ab", "abc"], ["abcd"]]
    assert first.tolist() == [[2, 1], [3, 1], [2, 1]]
    assert second.tolist() == [[3, 1], [4, 1]]
