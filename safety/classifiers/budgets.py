"""Benign budgets compared on saved out-of-fold scores (``manage.py moderation_budgets``).

One cross-validation of the embedded model takes many minutes, but its thresholds are
only :func:`~safety.classifiers.training.thresholds_choose` over the out-of-fold scores,
and the heads fitted on every row do not depend on them. So ``moderation_train
--oof-out FILE`` keeps those scores (:func:`oof_save`), :func:`budgets_compare` chooses
thresholds for several corpus budgets from them and reports what each flags, and
:func:`thresholds_rewrite` puts the chosen thresholds into the trained model file: the
same file a training run under that budget would have written.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from safety.categories import Category
from safety.classifiers.training import (
    EVERYDAY_FP_BUDGET,
    FP_BUDGET,
    TrainedModel,
    thresholds_choose,
)
from safety.dataset import TAG_CORPUS, TAG_EVERYDAY, TAG_SENSITIVE, TAG_SUPPORT, Example

# A corpus source whose name holds this word is fortunes (jokes and quotations, many
# about crime and death); every other corpus is documentation.
FORTUNES = "fortunes"


def oof_save(
    path: Path | str,
    model: TrainedModel,
    examples: Sequence[Example],
    sources: Sequence[str],
) -> None:
    """Write ``model``'s out-of-fold scores (n x categories) with what
    :func:`budgets_compare` needs of ``examples``: their labels (n x categories, bool),
    the tags that make the benign pools, and ``sources`` (n names: the corpus file's
    stem, or any other name for the labelled set) as an ``.npz``."""
    categories = list(Category)

    def tagged(tag: str) -> np.ndarray:
        return np.array([tag in e.tags for e in examples])

    np.savez_compressed(
        path,
        oof=model.oof_scores.astype(np.float32),
        y=np.array([[c in e.labels for c in categories] for e in examples]),
        everyday=tagged(TAG_EVERYDAY),
        corpus=tagged(TAG_CORPUS),
        sensitive=tagged(TAG_SENSITIVE),
        support=tagged(TAG_SUPPORT),
        sources=np.array(sources),
    )


@dataclass
class BudgetResult:
    """What one corpus budget gives: ``thresholds`` and ``recall`` (per category, in
    :class:`Category` order) and ``flagged``: pool name -> (benign texts flagged as any
    category, benign texts in the pool), out of fold."""

    corpus_budget: float
    thresholds: np.ndarray
    recall: np.ndarray
    flagged: dict[str, tuple[int, int]]


def budgets_compare(
    path: Path | str,
    corpus_budgets: Sequence[float],
    *,
    fp_budget: float = FP_BUDGET,
    everyday_budget: float = EVERYDAY_FP_BUDGET,
) -> list[BudgetResult]:
    """Choose thresholds under each of ``corpus_budgets`` (fractions) from the scores
    :func:`oof_save` wrote at ``path``, as training would (the same masks as
    :func:`~safety.classifiers.training.model_train`), and count per benign pool:
    ``everyday``, ``other benign`` (neither everyday nor corpus), ``sensitive``,
    ``support``, ``documentation`` (corpus text not of fortunes), ``fortunes``, and
    each corpus source."""
    with np.load(path, allow_pickle=False) as saved:
        oof, y = saved["oof"], saved["y"]
        benign = ~y.any(axis=1)
        everyday = saved["everyday"] & benign
        corpus = saved["corpus"] & benign & ~everyday
        sensitive, support = saved["sensitive"], saved["support"]
        sources = saved["sources"]
    fortunes = np.char.find(sources.astype(str), FORTUNES) >= 0
    pools = {
        "everyday": everyday,
        "other benign": benign & ~everyday & ~corpus,
        "sensitive": benign & sensitive & ~everyday & ~corpus,
        "support": benign & support & ~everyday & ~corpus,
        "documentation": corpus & ~fortunes,
        "fortunes": corpus & fortunes,
    }
    for source in dict.fromkeys(sources[corpus].tolist()):
        pools[str(source)] = corpus & (sources == source)
    results = []
    for budget in corpus_budgets:
        t = thresholds_choose(
            oof,
            y,
            fp_budget=fp_budget,
            everyday=everyday,
            everyday_budget=everyday_budget,
            corpus=corpus,
            corpus_budget=budget,
        )
        flagged = (oof >= t).any(axis=1)
        recall = np.array([(oof[y[:, j], j] >= t[j]).mean() for j in range(y.shape[1])])
        counts = {
            name: (int(flagged[rows].sum()), int(rows.sum()))
            for name, rows in pools.items()
            if rows.any()
        }
        results.append(BudgetResult(budget, t, recall, counts))
    return results


def thresholds_rewrite(model_path: Path | str, thresholds: np.ndarray) -> None:
    """Replace the ``thresholds`` array of the model file at ``model_path`` (one per
    category, in the file's order) and write it back compressed; every other array is
    kept as it was. Raises ``ValueError`` when the count differs from the file's."""
    with np.load(model_path, allow_pickle=False) as saved:
        arrays = {name: saved[name] for name in saved.files}
    if len(thresholds) != len(arrays["thresholds"]):
        raise ValueError(
            f"{len(thresholds)} thresholds for {len(arrays['thresholds'])} categories"
        )
    arrays["thresholds"] = np.asarray(thresholds, dtype=arrays["thresholds"].dtype)
    np.savez_compressed(model_path, **arrays)
