"""Training the embedded classifier (``manage.py moderation_train``).

Fits the gate and the category head of :mod:`safety.classifiers.embedded` with
scikit-learn's ``LogisticRegression`` (L2, ``class_weight="balanced"``: the classes
are uneven) and picks each category's threshold by 5-fold cross-validation on the
*training* set only: the lowest threshold at which at most ``FP_BUDGET_PER_CATEGORY``
of the benign training examples reach that category's score out of fold, so the ten
categories together flag at most ~5 % of benign text (the target of issue 10). The
held-out set is never read here.

scikit-learn is needed only to train (it is installed with sentence-transformers);
serving reads the saved arrays with numpy.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from safety.categories import Category
from safety.classifiers.features import NGRAM_BUCKETS, features
from safety.dataset import Example

# Inverse L2 strengths, chosen by cross-validation on the training set.
GATE_C = 16.0
CATEGORY_C = 4.0
FP_BUDGET_PER_CATEGORY = 0.005
FOLDS = 5
# Thresholds are searched on this grid; none is set below its floor.
THRESHOLD_GRID = np.round(np.arange(0.30, 0.96, 0.01), 2)


@dataclass
class TrainedModel:
    """Arrays of a trained model (the layout :class:`EmbeddedModel` reads) and the
    out-of-fold scores the thresholds were chosen from."""

    gate_w: np.ndarray
    gate_b: float
    cat_w: np.ndarray
    cat_b: np.ndarray
    thresholds: np.ndarray
    oof_scores: np.ndarray


def _fit(x: np.ndarray, y: np.ndarray, c: float) -> tuple[np.ndarray, float]:
    from sklearn.linear_model import LogisticRegression

    model = LogisticRegression(C=c, class_weight="balanced", max_iter=5000)
    model.fit(x, y)
    return model.coef_[0].astype(np.float32), float(model.intercept_[0])


def _fit_all(
    x: np.ndarray, y: np.ndarray
) -> tuple[np.ndarray, float, np.ndarray, np.ndarray]:
    harmful = y.any(axis=1)
    gate_w, gate_b = _fit(x, harmful.astype(int), GATE_C)
    ws, bs = [], []
    for j in range(y.shape[1]):
        w, b = _fit(x[harmful], y[harmful, j].astype(int), CATEGORY_C)
        ws.append(w)
        bs.append(b)
    return gate_w, gate_b, np.stack(ws), np.asarray(bs, dtype=np.float32)


def _scores(
    x: np.ndarray,
    gate_w: np.ndarray,
    gate_b: float,
    cat_w: np.ndarray,
    cat_b: np.ndarray,
) -> np.ndarray:
    gate = 1.0 / (1.0 + np.exp(-(x @ gate_w + gate_b)))
    q = 1.0 / (1.0 + np.exp(-(x @ cat_w.T + cat_b)))
    return gate[:, None] * q / np.maximum(q.max(axis=1, keepdims=True), 1e-9)


def model_train(
    examples: Sequence[Example],
    vectors: Sequence[Sequence[float]],
    *,
    fp_budget: float = FP_BUDGET_PER_CATEGORY,
    progress: Callable[[str], None] = lambda _msg: None,
) -> TrainedModel:
    """Train on ``examples`` with their 384-d ``vectors`` (same order); see module doc."""
    from sklearn.model_selection import StratifiedKFold

    categories = list(Category)
    x = np.stack([features(e.text, v) for e, v in zip(examples, vectors, strict=True)])
    y = np.array([[c in e.labels for c in categories] for e in examples])
    benign = ~y.any(axis=1)
    if not benign.any() or not y.any(axis=0).all():
        raise ValueError("the training set needs benign examples and every category")
    strata = np.array(
        [
            min(categories.index(c) + 1 for c in e.labels) if e.labels else 0
            for e in examples
        ]
    )
    oof = np.zeros(y.shape)
    folds = StratifiedKFold(FOLDS, shuffle=True, random_state=0)
    for k, (train, test) in enumerate(folds.split(x, strata), start=1):
        progress(f"cross-validation fold {k}/{FOLDS}")
        oof[test] = _scores(x[test], *_fit_all(x[train], y[train]))
    thresholds = np.empty(len(categories), dtype=np.float32)
    for j in range(len(categories)):
        fp = np.array([(oof[benign, j] >= t).mean() for t in THRESHOLD_GRID])
        ok = THRESHOLD_GRID[fp <= fp_budget]
        thresholds[j] = ok[0] if len(ok) else THRESHOLD_GRID[-1]
    progress("fitting on the whole training set")
    gate_w, gate_b, cat_w, cat_b = _fit_all(x, y)
    return TrainedModel(gate_w, gate_b, cat_w, cat_b, thresholds, oof)


def model_save(model: TrainedModel, path: Path | str, *, embedding_model: str) -> None:
    """Write ``model`` as a compressed ``.npz`` (float16 weights: ~100 KB)."""
    np.savez_compressed(
        path,
        categories=np.array([c.value for c in Category]),
        gate_w=model.gate_w.astype(np.float16),
        gate_b=np.float32(model.gate_b),
        cat_w=model.cat_w.astype(np.float16),
        cat_b=model.cat_b.astype(np.float32),
        thresholds=model.thresholds,
        ngram_buckets=np.int32(NGRAM_BUCKETS),
        embedding_model=np.array(embedding_model),
    )
