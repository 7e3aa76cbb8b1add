"""Cross-validation folds of the classifiers' training (safety.classifiers.training)."""

from __future__ import annotations

import numpy as np
from sklearn.model_selection import StratifiedKFold

from safety.classifiers.training import FOLDS, folds_split


def test_grouped_folds_keep_every_group_in_one_fold() -> None:
    rng = np.random.default_rng(7)
    strata = rng.integers(0, 4, 400)
    # 100 originals with three translations each, next to 200 rows of their own
    groups = np.concatenate([np.arange(200), np.repeat(np.arange(200, 300), 2)])
    folds = folds_split(strata, groups)
    assert len(folds) == FOLDS
    tested = np.concatenate([test for _, test in folds])
    assert sorted(tested) == list(range(400))
    for train, test in folds:
        assert not set(groups[train]) & set(groups[test])


def test_ungrouped_folds_split_a_translation_from_its_original() -> None:
    strata = np.tile(np.arange(4), 100)
    groups = np.repeat(np.arange(200), 2)
    split = 0
    for train, test in folds_split(strata):
        split += len(set(groups[train]) & set(groups[test]))
    # the leakage the groups exist for: without them, pairs land in different folds
    assert split > 0


def test_ungrouped_folds_are_the_stratified_folds_the_english_model_always_used() -> (
    None
):
    strata = np.tile(np.arange(5), 60)
    expected = StratifiedKFold(FOLDS, shuffle=True, random_state=0).split(
        np.zeros(len(strata)), strata
    )
    for (train, test), (train_0, test_0) in zip(
        folds_split(strata), expected, strict=True
    ):
        assert list(test) == list(test_0) and list(train) == list(train_0)
