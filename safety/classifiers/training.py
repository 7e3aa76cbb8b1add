"""Training the embedded classifier (``manage.py moderation_train``).

Fits the gate and the category head of :mod:`safety.classifiers.embedded` with
scikit-learn's ``LogisticRegression`` (L2, ``class_weight="balanced"``: the classes
are uneven) and picks the per-category thresholds from 5-fold cross-validation on the
*training* set only (:func:`thresholds_choose`): all categories start at the lowest
common threshold whose out-of-fold benign false-positive rate (flagged as anything)
is within ``FP_BUDGET`` (5 %, the target of :mod:`safety.evaluation`) and
whose rate on everyday chat is within ``EVERYDAY_FP_BUDGET`` (1 %) and on text nobody
here wrote (tag ``corpus``) within ``CORPUS_FP_BUDGET`` (0.3 %), then the category
with the lowest recall is lowered step by step while the budget holds. The held-out
set is never read here.

scikit-learn (and scipy, which it needs: the inputs are a sparse matrix while
training) is needed only to train (it is installed with sentence-transformers);
serving reads the saved arrays with numpy.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy import sparse

from safety.categories import Category
from safety.classifiers.features import (
    CHAR_BUCKETS,
    EXEMPLAR_SCALE,
    NGRAM_BUCKETS,
    exemplar_similarities,
    features,
    heads_score,
    ids_removed,
)
from safety.dataset import TAG_CORPUS, TAG_EVERYDAY, Example

# Inverse L2 strengths, chosen by cross-validation on the training set.
GATE_C = 16.0
CATEGORY_C = 4.0
# The other benign pool is mostly sensitive topics written here; with ordinary text
# under budgets of its own this is the budget that sets recall. Chosen on out-of-fold
# scores (safety/data/README.md, "The other-benign budget").
FP_BUDGET = 0.05
# Ordinary chat (tag ``everyday``) is counted apart, with its own, tighter budget: many
# easy benign examples in the pool would otherwise loosen the budget on the hard ones
# (sensitive topics), and blocking "thanks" is worse than blocking a borderline question.
EVERYDAY_FP_BUDGET = 0.01
# Weight of one everyday example in the gate, relative to another benign one.
EVERYDAY_WEIGHT = 1.0
# Benign text nobody here wrote (tag ``corpus``: documentation, fortunes) has its own
# pool and budget too: it is what ordinary messages look like, and a false block on it
# is the failure issue 24 measures (goal <= 0.5 % on the evaluation corpora).
CORPUS_FP_BUDGET = 0.003
CORPUS_WEIGHT = 1.0
FOLDS = 5
# Thresholds are searched on this grid; none is set below its floor.
THRESHOLD_GRID = np.round(np.arange(0.30, 0.96, 0.01), 2)
_MAX_STEPS = 500


@dataclass
class TrainedModel:
    """Arrays of a trained model (the layout :class:`EmbeddedModel` reads) and the
    out-of-fold scores the thresholds were chosen from. ``exemplars``: the training
    vectors (m x 384); ``exemplar_members``: m x g bool, the groups of
    :func:`exemplar_groups`."""

    gate_w: np.ndarray
    gate_b: float
    cat_w: np.ndarray
    cat_b: np.ndarray
    thresholds: np.ndarray
    oof_scores: np.ndarray
    exemplars: np.ndarray
    exemplar_members: np.ndarray


def _fit(
    x: np.ndarray, y: np.ndarray, c: float, weight: np.ndarray | None = None
) -> tuple[np.ndarray, float]:
    from sklearn.linear_model import LogisticRegression

    model = LogisticRegression(
        C=c, class_weight=None if weight is not None else "balanced", max_iter=5000
    )
    model.fit(x, y, sample_weight=weight)
    return model.coef_[0].astype(np.float32), float(model.intercept_[0])


def gate_weights(
    harmful: np.ndarray, everyday: np.ndarray, corpus: np.ndarray | None = None
) -> np.ndarray:
    """Per-example weights of the gate: the classes balanced as by scikit-learn's
    ``class_weight="balanced"``, counting benign examples *without* everyday chat, which
    then weighs per example as much as any other benign one. Balancing over all benign
    examples would halve the weight of the hard ones (sensitive topics) as everyday
    chat is added, and the gate would learn "short and ordinary = benign" at their
    expense."""
    n_harm = max(int(harmful.sum()), 1)
    corpus = np.zeros(len(harmful), bool) if corpus is None else corpus
    n_other = max(int((~harmful & ~everyday & ~corpus).sum()), 1)
    half = (n_harm + n_other) / 2
    weight = np.where(harmful, half / n_harm, half / n_other)
    weight = np.where(corpus, weight * CORPUS_WEIGHT, weight)
    return np.where(everyday, weight * EVERYDAY_WEIGHT, weight)


def heads_fit(
    x: np.ndarray, y: np.ndarray, everyday: np.ndarray, corpus: np.ndarray | None = None
) -> tuple[np.ndarray, float, np.ndarray, np.ndarray]:
    """Fit the gate and the category heads on inputs ``x`` (n x d) with labels ``y``
    (n x categories); ``everyday`` / ``corpus`` mark benign rows weighed apart
    (:func:`gate_weights`). Returns (gate_w, gate_b, cat_w, cat_b)."""
    harmful = np.asarray(y.any(axis=1))  # an array, as numpy's stubs cannot tell
    gate_w, gate_b = _fit(
        x, harmful.astype(int), GATE_C, gate_weights(harmful, everyday, corpus)
    )
    ws, bs = [], []
    for j in range(y.shape[1]):
        w, b = _fit(x[harmful], y[harmful, j].astype(int), CATEGORY_C)
        ws.append(w)
        bs.append(b)
    return gate_w, gate_b, np.stack(ws), np.asarray(bs, dtype=np.float32)


def thresholds_choose(
    oof: np.ndarray,
    y: np.ndarray,
    *,
    fp_budget: float = FP_BUDGET,
    everyday: np.ndarray | None = None,
    everyday_budget: float = EVERYDAY_FP_BUDGET,
    corpus: np.ndarray | None = None,
    corpus_budget: float = CORPUS_FP_BUDGET,
) -> np.ndarray:
    """Choose one threshold per category from out-of-fold scores ``oof`` (examples x
    categories) and labels ``y`` (same shape, bool; a row without labels is benign).

    Start from the lowest common threshold of ``THRESHOLD_GRID`` at which at most
    ``fp_budget`` (a fraction) of benign rows reach any category's threshold; then,
    repeatedly, lower by one grid step the threshold of the category with the lowest
    recall whose step gains recall and keeps the benign rate within the budget. Rows
    marked in ``everyday`` (bool, optional) are left out of that rate and held to
    ``everyday_budget`` instead, rows marked in ``corpus`` to ``corpus_budget``.
    """
    everyday = np.zeros(len(y), bool) if everyday is None else everyday
    corpus = np.zeros(len(y), bool) if corpus is None else corpus & ~everyday
    benign = ~y.any(axis=1) & ~everyday & ~corpus
    pools = [
        (benign, fp_budget),
        (everyday & ~y.any(axis=1), everyday_budget),
        (corpus & ~y.any(axis=1), corpus_budget),
    ]
    pools = [(rows, budget) for rows, budget in pools if rows.any()]

    def over(t: np.ndarray) -> bool:
        return any(
            (oof[rows] >= t).any(axis=1).mean() > budget for rows, budget in pools
        )

    def recalls(t: np.ndarray) -> np.ndarray:
        return np.array([(oof[y[:, j], j] >= t[j]).mean() for j in range(y.shape[1])])

    start = next(
        (g for g in THRESHOLD_GRID if not over(np.full(y.shape[1], g))),
        THRESHOLD_GRID[-1],
    )
    t = np.full(y.shape[1], start, dtype=np.float32)
    step = 0.01
    for _ in range(_MAX_STEPS):
        r = recalls(t)
        for j in np.argsort(r, kind="stable"):
            trial = t.copy()
            trial[j] = round(float(t[j]) - step, 2)
            if trial[j] < 0.05 or over(trial):
                continue
            if recalls(trial)[j] > r[j] or (oof[y[:, j], j] >= trial[j]).all():
                t = trial
                break
        else:
            break
    return t


def exemplar_groups(
    y: np.ndarray, everyday: np.ndarray, corpus: np.ndarray | None = None
) -> np.ndarray:
    """Return the exemplar groups of training rows with labels ``y`` (n x categories,
    bool) as an n x (categories + 3) bool matrix: one column per category, then the
    benign rows other than everyday chat and corpus text, then everyday chat, then
    corpus text (``corpus``, bool; none when omitted)."""
    benign = ~y.any(axis=1)
    corpus = np.zeros(len(y), bool) if corpus is None else corpus & ~everyday
    return np.column_stack(
        [y, benign & ~everyday & ~corpus, benign & everyday, benign & corpus]
    )


def inputs_with_exemplars(
    x: np.ndarray,
    vectors: np.ndarray,
    bank: np.ndarray,
    members: np.ndarray,
    *,
    exclude: np.ndarray | None = None,
) -> np.ndarray:
    """Append the scaled exemplar similarities of ``vectors`` against ``bank`` (see
    :func:`safety.classifiers.features.exemplar_similarities`) to the text features
    ``x`` (n x TEXT_FEATURE_DIM, an array or a scipy sparse matrix); returns n x
    (TEXT_FEATURE_DIM + groups), of the same kind (CSR when sparse)."""
    sims = exemplar_similarities(vectors, bank, members, exclude=exclude)
    if sparse.issparse(x):
        return sparse.hstack([x, EXEMPLAR_SCALE * sims], format="csr")
    return np.hstack([x, EXEMPLAR_SCALE * sims])


def model_train(
    examples: Sequence[Example],
    vectors: Sequence[Sequence[float]] | np.ndarray,
    *,
    fp_budget: float = FP_BUDGET,
    corpus_budget: float = CORPUS_FP_BUDGET,
    progress: Callable[[str], None] = lambda _msg: None,
) -> TrainedModel:
    """Train on ``examples`` with the 384-d ``vectors`` of their texts without ids
    (:func:`~safety.classifiers.features.ids_removed`, what serving embeds; same
    order); see module doc. ``corpus_budget``: the benign corpus budget (a fraction)
    of :func:`thresholds_choose`."""
    categories = list(Category)
    # sparse: the n-gram blocks are mostly zero, and the fits run several times
    # faster on a CSR matrix (the same objective, so the same weights)
    x = sparse.vstack(
        [
            sparse.csr_matrix(features(ids_removed(e.text), v))
            for e, v in zip(examples, vectors, strict=True)
        ],
        format="csr",
    )
    vecs = np.asarray(vectors, dtype=np.float32)
    y = np.array([[c in e.labels for c in categories] for e in examples])
    benign = ~y.any(axis=1)
    if not benign.any() or not y.any(axis=0).all():
        raise ValueError("the training set needs benign examples and every category")
    strata = np.array(
        [
            min(categories.index(c) + 1 for c in e.labels)
            if e.labels
            else -1
            if TAG_CORPUS in e.tags
            else 0
            for e in examples
        ]
    )
    everyday = np.array([TAG_EVERYDAY in e.tags for e in examples]) & benign
    corpus = np.array([TAG_CORPUS in e.tags for e in examples]) & benign & ~everyday
    return heads_cross_fit(
        x,
        vecs,
        y,
        strata,
        everyday=everyday,
        corpus=corpus,
        fp_budget=fp_budget,
        corpus_budget=corpus_budget,
        progress=progress,
    )


def folds_split(
    strata: np.ndarray, groups: np.ndarray | None = None
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Return the ``FOLDS`` (train rows, test rows) index pairs of cross-validation,
    stratified over ``strata`` (n ints); with ``groups`` (n ints) the rows of one group
    always share a fold (scikit-learn's ``StratifiedGroupKFold``), so a translation is
    never judged by a model that trained on its original. Seeded: the same inputs give
    the same folds."""
    from sklearn.model_selection import StratifiedGroupKFold, StratifiedKFold

    rows = np.zeros(len(strata))
    if groups is None:
        folds = StratifiedKFold(FOLDS, shuffle=True, random_state=0)
        return list(folds.split(rows, strata))
    grouped = StratifiedGroupKFold(FOLDS, shuffle=True, random_state=0)
    return list(grouped.split(rows, strata, groups))


def heads_cross_fit(
    x: np.ndarray,
    vecs: np.ndarray,
    y: np.ndarray,
    strata: np.ndarray,
    *,
    everyday: np.ndarray,
    corpus: np.ndarray | None = None,
    groups: np.ndarray | None = None,
    fp_budget: float = FP_BUDGET,
    corpus_budget: float = CORPUS_FP_BUDGET,
    progress: Callable[[str], None] = lambda _msg: None,
) -> TrainedModel:
    """Cross-validate (``FOLDS`` stratified folds over ``strata``, rows of one of
    ``groups`` in one fold: :func:`folds_split`) and fit the heads: ``x`` (n x d) the
    text inputs without exemplar similarities, ``vecs`` (n x 384) the vectors the
    exemplars are compared on, ``y`` (n x categories) the labels; thresholds from the
    out-of-fold scores (:func:`thresholds_choose`), then the heads fitted on every
    row. The one procedure of the embedded and multilingual models."""
    members = exemplar_groups(y, everyday, corpus)
    oof = np.zeros(y.shape)
    fold_corpus = (lambda rows: None) if corpus is None else (lambda rows: corpus[rows])
    for k, (train, test) in enumerate(folds_split(strata, groups), start=1):
        progress(f"cross-validation fold {k}/{FOLDS}")
        # The fold's own training rows are the exemplars: a training row is compared
        # with the others (leave-one-out), as a new text would be with all of them.
        bank, bank_members = vecs[train], members[train]
        x_train = inputs_with_exemplars(
            x[train], bank, bank, bank_members, exclude=np.arange(len(train))
        )
        x_test = inputs_with_exemplars(x[test], vecs[test], bank, bank_members)
        oof[test] = heads_score(
            x_test,
            *heads_fit(x_train, y[train], everyday[train], fold_corpus(train)),
        )
    thresholds = thresholds_choose(
        oof,
        y,
        fp_budget=fp_budget,
        everyday=everyday,
        corpus=corpus,
        corpus_budget=corpus_budget,
    )
    progress("fitting on the whole training set")
    x_all = inputs_with_exemplars(x, vecs, vecs, members, exclude=np.arange(x.shape[0]))
    gate_w, gate_b, cat_w, cat_b = heads_fit(x_all, y, everyday, corpus)
    return TrainedModel(gate_w, gate_b, cat_w, cat_b, thresholds, oof, vecs, members)


def model_save(model: TrainedModel, path: Path | str, *, embedding_model: str) -> None:
    """Write ``model`` as a compressed ``.npz`` (float16 weights and exemplar vectors:
    ~2 MB for 2,851 exemplars)."""
    np.savez_compressed(
        path,
        categories=np.array([c.value for c in Category]),
        gate_w=model.gate_w.astype(np.float16),
        gate_b=np.float32(model.gate_b),
        cat_w=model.cat_w.astype(np.float16),
        cat_b=model.cat_b.astype(np.float32),
        thresholds=model.thresholds,
        ngram_buckets=np.int32(NGRAM_BUCKETS),
        char_buckets=np.int32(CHAR_BUCKETS),
        exemplars=model.exemplars.astype(np.float16),
        exemplar_members=model.exemplar_members.astype(bool),
        embedding_model=np.array(embedding_model),
    )
