"""Corpus budgets compared on saved out-of-fold scores (safety.classifiers.budgets)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from safety.categories import Category
from safety.classifiers.budgets import budgets_compare, oof_save, thresholds_rewrite
from safety.classifiers.training import TrainedModel
from safety.dataset import TAG_CORPUS, Example

N_CAT = len(Category)


def _saved(tmp_path: Path) -> Path:
    """Ten harmful rows (every category) scored 0.5-0.95, 400 documentation rows with
    four at 0.6 in the first category, 400 fortunes rows with eight, the rest 0."""
    harmful = np.linspace(0.5, 0.95, 10)
    doc = np.r_[np.full(4, 0.6), np.zeros(396)]
    fortune = np.r_[np.full(8, 0.6), np.zeros(392)]
    oof = np.zeros((810, N_CAT))
    oof[:10] = harmful[:, None]
    oof[10:, 0] = np.r_[doc, fortune]
    harm = Example("harm", frozenset(Category))
    corpus = Example("text", tags=frozenset({TAG_CORPUS}))
    examples = [harm] * 10 + [corpus] * 800
    sources = ["set"] * 10 + ["train_manpages"] * 400 + ["train_fortunes"] * 400
    model = TrainedModel(
        np.zeros(4), 0.0, np.zeros((N_CAT, 4)), np.zeros(N_CAT), np.zeros(N_CAT),
        oof, np.zeros((810, 4)), np.zeros((810, N_CAT + 3), bool),
    )  # fmt: skip
    path = tmp_path / "oof.npz"
    oof_save(path, model, examples, sources)
    return path


def test_a_looser_corpus_budget_lowers_thresholds_and_counts_each_pool(
    tmp_path: Path,
) -> None:
    tight, loose = budgets_compare(_saved(tmp_path), [0.005, 0.02])
    # 12 of 800 corpus rows score 0.6: 1.5 %, over 0.5 % but within 2 %
    assert tight.thresholds[0] > 0.6 and loose.thresholds[0] <= 0.6
    assert loose.recall[0] > tight.recall[0]
    assert loose.flagged["documentation"] == (4, 400)
    assert loose.flagged["fortunes"] == (8, 400)
    assert loose.flagged["train_manpages"] == (4, 400)
    assert tight.flagged["documentation"] == (0, 400)


def test_rewritten_thresholds_change_nothing_else(tmp_path: Path) -> None:
    path = tmp_path / "model.npz"
    np.savez_compressed(
        path, thresholds=np.full(3, 0.7, np.float32), gate_w=np.arange(4.0)
    )
    thresholds_rewrite(path, np.array([0.5, 0.6, 0.65]))
    with np.load(path) as saved:
        assert saved["thresholds"].dtype == np.float32
        assert np.allclose(saved["thresholds"], [0.5, 0.6, 0.65])
        assert list(saved["gate_w"]) == [0.0, 1.0, 2.0, 3.0]
