"""`manage.py moderation_train [--set FILE] [--out FILE]`: train the embedded
moderation classifier and write its weights (default ``safety/data/embedded_model.npz``,
committed so that serving needs no training step).

The training set is the JSONL file plus, as benign examples, the hard negatives staff
recorded by upholding appeals (:class:`safety.models.HardNegative`; ``--no-hard-negatives``
leaves them out). The texts are embedded on the embedding pool, so an embedding worker must be running
(``manage.py run_inference_worker --engine sentence-transformers``), or with
``--in-process`` by the same engine in this process; ``--vectors-cache FILE`` keeps
the vectors for the next run. ``--oof-out FILE`` keeps the out-of-fold scores, from
which ``manage.py moderation_budgets`` compares corpus budgets without training again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import numpy as np
from django.core.management.base import BaseCommand, CommandError

from inference.embeddings import EmbeddingUnavailable, embed_texts
from inference.engines.base import EngineError
from safety.categories import Category
from safety.classifiers.budgets import oof_save
from safety.classifiers.embedded import MODEL_PATH
from safety.classifiers.features import ids_removed
from safety.classifiers.training import (
    CORPUS_FP_BUDGET,
    EVERYDAY_FP_BUDGET,
    FP_BUDGET,
    model_save,
    model_train,
)
from safety.classifiers.vector_cache import vectors_cached
from safety.dataset import (
    TAG_CORPUS,
    TAG_EVERYDAY,
    TAG_SENSITIVE,
    TAG_SUPPORT,
    TRAIN_CORPORA,
    TRAIN_SET,
    Example,
    examples_load,
)
from safety.models import HardNegative
from safety.perturbation import examples_augment

# The tag of a hard negative (a text staff judged harmless after a block).
TAG_HARD_NEGATIVE = "hard_negative"

_BATCH = 64


def hard_negatives() -> list[Example]:
    """The hard negatives staff recorded (upheld appeals), as benign examples tagged
    :data:`TAG_HARD_NEGATIVE`, each distinct text once, oldest first."""
    texts = HardNegative.objects.order_by("created_at").values_list("text", flat=True)
    return [
        Example(text=t, tags=frozenset({TAG_HARD_NEGATIVE}))
        for t in dict.fromkeys(texts)
        if t.strip()
    ]


class Command(BaseCommand):
    help = "Train the embedded moderation classifier on the labelled training set."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--set", default=str(TRAIN_SET), help="training JSONL")
        parser.add_argument("--out", default=str(MODEL_PATH), help="model file (.npz)")
        parser.add_argument(
            "--fp-budget",
            type=float,
            default=FP_BUDGET,
            help="most benign training examples (a fraction; everyday chat apart) the "
            "categories together may flag out of fold; sets the thresholds",
        )
        parser.add_argument(
            "--corpus-budget",
            type=float,
            default=CORPUS_FP_BUDGET,
            help="most benign corpus texts (a fraction) the categories together may "
            "flag out of fold",
        )
        parser.add_argument(
            "--in-process",
            action="store_true",
            help="embed with the embedding pool's engine in this process (no worker)",
        )
        parser.add_argument(
            "--vectors-cache",
            default=None,
            help="an .npz of vectors by text, read and then written (a rerun over the "
            "same texts embeds nothing)",
        )
        parser.add_argument(
            "--oof-out",
            default=None,
            help="write the out-of-fold scores, labels and sources here (.npz) for "
            "manage.py moderation_budgets",
        )
        parser.add_argument(
            "--no-hard-negatives",
            action="store_true",
            help="leave out the hard negatives of upheld appeals (HardNegative rows)",
        )
        parser.add_argument(
            "--augment",
            action="store_true",
            help="add a perturbed copy of each harmful and everyday example "
            "(safety.perturbation.examples_augment; off: it did worse, see "
            "safety/data/README.md)",
        )
        parser.add_argument(
            "--no-corpora",
            action="store_true",
            help="leave out the training-side benign corpora (safety/data/corpora/"
            "train_*.jsonl, hard negatives of text nobody here wrote)",
        )

    model_name = ""

    def _embedder(self, *, in_process: bool) -> Callable[[list[str]], np.ndarray]:
        """A function embedding texts on the pool (default) or in this process."""
        if in_process:
            from inference.engines.sbert import SentenceTransformersEngine

            engine = SentenceTransformersEngine()
            asyncio.run(engine.start())
            self.model_name = f"sentence-transformers/{engine.model}"

            def local(texts: list[str]) -> np.ndarray:
                [result] = asyncio.run(engine.embed([texts]))
                if isinstance(result, EngineError):
                    raise CommandError(f"embedding failed: {result}")
                return np.asarray(result.vectors, dtype=np.float32)

            return local

        def pooled(texts: list[str]) -> np.ndarray:
            batch = embed_texts(texts, timeout_s=120)
            self.model_name = batch.model
            return np.asarray(batch.vectors, dtype=np.float32)

        return pooled

    def handle(self, *args: Any, **opts: Any) -> None:
        examples = examples_load(opts["set"])
        if not opts["no_hard_negatives"]:
            hard = hard_negatives()
            examples += hard
            self.stdout.write(f"{len(hard)} hard negatives from upheld appeals")
        if opts["augment"]:
            examples += examples_augment(examples)
        sources = ["set"] * len(examples)
        if not opts["no_corpora"]:
            for path in TRAIN_CORPORA:
                corpus = examples_load(path)
                examples += corpus
                sources += [path.stem] * len(corpus)
        texts = [ids_removed(e.text) for e in examples]
        try:
            vectors = vectors_cached(
                texts,
                self._embedder(in_process=opts["in_process"]),
                path=opts["vectors_cache"],
                batch=_BATCH,
            )
        except EmbeddingUnavailable as exc:
            raise CommandError(
                f"{exc} Start an embedding worker (`manage.py run_inference_worker "
                "--engine sentence-transformers`) and run this command again."
            ) from exc
        # every vector from the cache and none from the pool: the pool's model unasked
        self.model_name = self.model_name or "unknown (vectors from --vectors-cache)"
        self.stdout.write(f"{len(examples)} examples embedded with {self.model_name}")
        model = model_train(
            examples,
            vectors,
            fp_budget=opts["fp_budget"],
            corpus_budget=opts["corpus_budget"],
            progress=self.stdout.write,
        )
        model_save(model, opts["out"], embedding_model=self.model_name)
        if opts["oof_out"]:
            oof_save(opts["oof_out"], model, examples, sources)
        benign = np.array([e.benign for e in examples])
        self.stdout.write(
            f"cross-validated on the training set (benign FP budget, all categories "
            f"{opts['fp_budget']:.1%}; everyday chat {EVERYDAY_FP_BUDGET:.1%}; corpus "
            f"{opts['corpus_budget']:.2%}):"
        )
        self.stdout.write(f"  {'category':18} {'threshold':>9} {'recall':>7}")
        for j, category in enumerate(Category):
            positive = np.array([category in e.labels for e in examples])
            recall = (model.oof_scores[positive, j] >= model.thresholds[j]).mean()
            self.stdout.write(
                f"  {category.value:18} {model.thresholds[j]:9.2f} {recall:7.2f}"
            )
        flagged = np.asarray((model.oof_scores >= model.thresholds).any(axis=1))
        self.stdout.write(
            f"  benign flagged (out of fold, without rules): {flagged[benign].mean():.1%}"
        )
        for tag in (TAG_EVERYDAY, TAG_SENSITIVE, TAG_SUPPORT, TAG_CORPUS):
            subset = benign & np.array([tag in e.tags for e in examples])
            if subset.any():
                self.stdout.write(
                    f"    of which {tag}: {flagged[subset].sum()}/{subset.sum()} = "
                    f"{flagged[subset].mean():.1%}"
                )
        self.stdout.write(self.style.SUCCESS(f"wrote {opts['out']}"))
