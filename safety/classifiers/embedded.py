"""The default backend: a classifier trained on all-MiniLM-L6-v2 embeddings of the
labelled set in ``safety/data/``, plus prompt-injection rules.

Two logistic regressions over :func:`safety.classifiers.features.features` and the
text's similarities to the labelled training examples (nearest exemplars per
category, :func:`safety.classifiers.features.exemplar_similarities`), trained by
``manage.py moderation_train`` (:mod:`safety.classifiers.training`) and stored in
``safety/data/embedded_model.npz`` (committed, so serving needs no training step):

- a *gate*: P(the text asks for harm), trained on every harmful example against every
  benign one. Pooling the categories gives it ten times the positives of any
  one-vs-rest model, which is what separates "how do I build a bomb" from "history of
  the atomic bomb" with a few hundred examples;
- a *category head*: one-vs-rest over the harmful examples only, saying which harm.

A category's score is ``gate * q_c / max(q)``: the most likely category carries the
gate's probability, the others in proportion. A rule match (:mod:`.rules`) sets
``prompt_injection`` to 1; a text of at most ``SHORT_TEXT_WORDS`` words gets its
``prompt_injection`` score from the rules only. Thresholds per category were chosen by cross-validation on
the training set (``moderation_train``) and are stored with the weights; the settings
``SAFETY_THRESHOLDS`` (and later the admin) override them.

The model reads the text without its ids (URLs, hashes, paths, long numbers:
:func:`safety.classifiers.features.ids_removed`), so an id added to a message changes
neither its vector nor its n-grams; such a text is embedded once more without them.
Serving is a few matrix-vector products in numpy (the exemplar similarities are one
product with the ~2,900 stored training vectors, well under a millisecond); the text's vector comes from the
embedding pool (or the caller's shared one). No model runs in the web process.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from django.conf import settings

from inference.embeddings import EmbeddingUnavailable, embed_texts
from safety.categories import Category
from safety.classifiers.base import (
    Classifier,
    ModerationUnavailable,
    Prepared,
    Verdict,
)
from safety.classifiers.features import (
    EXEMPLAR_SCALE,
    TEXT_FEATURE_DIM,
    HeadWeights,
    features,
    ids_removed,
    text_grams,
)
from safety.classifiers.rules import injection_match
from safety.dataset import DATA_DIR

MODEL_PATH = DATA_DIR / "embedded_model.npz"

# A text of at most this many words cannot carry an instruction to override ("ok",
# "thanks", "I'm Ada."): its prompt-injection score comes from the rules only, which
# still catch the short stereotyped ones ("developer mode", "ignore previous
# instructions"). The model alone flagged such replies as injection.
SHORT_TEXT_WORDS = 3
_WORDS = re.compile(r"\S+")


class EmbeddedModel(HeadWeights):
    """The learned weights (see module docstring); loaded from an ``.npz`` file."""

    def __init__(self, arrays: Any) -> None:
        files = getattr(arrays, "files", arrays)
        if "exemplars" not in files:
            raise ValueError("model has no exemplars: run manage.py moderation_train")
        super().__init__(arrays)
        expected = TEXT_FEATURE_DIM + self.exemplar_members.shape[1]
        if self.gate_w.shape != (expected,):
            raise ValueError(
                f"model expects {self.gate_w.shape[0]} features, code makes "
                f"{expected}: run manage.py moderation_train"
            )

    def inputs(
        self, text: str, vector: Sequence[float], *, grams: np.ndarray | None = None
    ) -> np.ndarray:
        """Return the model's input for ``text`` with its 384-d ``vector``: the text
        features, then the scaled similarities to the stored exemplars. ``grams``:
        :func:`~safety.classifiers.features.text_grams` of ``text``, if made."""
        sims = self.exemplar_sims(np.asarray(vector, dtype=np.float32)[None, :])[0]
        return np.concatenate(
            [features(text, vector, grams=grams), EXEMPLAR_SCALE * sims]
        )

    @classmethod
    def load(cls, path: Path | str = MODEL_PATH) -> EmbeddedModel:
        """Read a model file written by :func:`safety.classifiers.training.model_save`.

        Raises ``FileNotFoundError`` when it is missing, ``ValueError`` when stale.
        """
        with np.load(path, allow_pickle=False) as arrays:
            return cls(arrays)

    def scores(self, x: np.ndarray) -> dict[Category, float]:
        """Return every category's score (0..1) for a feature vector ``x``."""
        row = self.head_scores(np.asarray(x)[None, :])[0]
        return {c: float(row[i]) for i, c in enumerate(self.categories)}


@functools.cache
def embedded_model() -> EmbeddedModel:
    """The committed model, loaded once per process."""
    return EmbeddedModel.load(MODEL_PATH)


@dataclass(frozen=True, eq=False)
class Reading(Prepared):
    """What the embedded backend reads of a text before its vector: ``read``, the
    text without its ids (what is embedded); ``grams``, the n-gram features of
    ``read``; ``rule``, the prompt-injection phrase matched in the text (or None);
    ``short``, whether ``read`` has at most ``SHORT_TEXT_WORDS`` words."""

    read: str
    grams: np.ndarray
    rule: str | None
    short: bool


class EmbeddedClassifier(Classifier):
    """The embedded default backend (see module docstring)."""

    name = "embedded"
    uses_vector = True

    def __init__(
        self,
        *,
        model: EmbeddedModel | None = None,
        thresholds: dict[Category, float] | None = None,
        timeout_s: float | None = None,
    ) -> None:
        self.model = model or embedded_model()
        overrides = {
            Category(k): float(v)
            for k, v in (getattr(settings, "SAFETY_THRESHOLDS", None) or {}).items()
        }
        self.thresholds = {**self.model.thresholds, **overrides, **(thresholds or {})}
        self.timeout_s = timeout_s

    def vectors_embed(self, texts: Sequence[str]) -> list[list[float]]:
        """The 384-d vectors of ``texts`` from the embedding pool. Raises
        :class:`ModerationUnavailable` when no embedding worker answers."""
        try:
            return embed_texts(list(texts), timeout_s=self.timeout_s).vectors
        except EmbeddingUnavailable as exc:
            raise ModerationUnavailable(
                f"Content moderation is unavailable right now: {exc}"
            ) from exc

    def _verdict(self, reading: Reading, vector: Sequence[float]) -> Verdict:
        model = self.model
        scores = model.scores(model.inputs(reading.read, vector, grams=reading.grams))
        if reading.short:
            scores[Category.PROMPT_INJECTION] = 0.0
        if reading.rule is not None:
            scores[Category.PROMPT_INJECTION] = 1.0
        return Verdict.from_scores(
            scores,
            thresholds=self.thresholds,
            backend=self.name,
            detail={"rule": reading.rule} if reading.rule else {},
        )

    def vector_text(self, text: str) -> str:
        """``text`` without its ids (:func:`~safety.classifiers.features.ids_removed`):
        what the model embeds and reads."""
        return ids_removed(text)

    def prepare(self, text: str) -> Reading:
        """The :class:`Reading` of ``text`` (all but the vector's part of a verdict)."""
        read = ids_removed(text)
        return Reading(
            text=text,
            read=read,
            grams=text_grams(read),
            rule=injection_match(text),
            short=len(_WORDS.findall(read)) <= SHORT_TEXT_WORDS,
        )

    def classify(self, text: str, *, vector: Sequence[float] | None = None) -> Verdict:
        """Judge ``text`` (see :meth:`Classifier.classify`). The model reads the text
        without its ids (:func:`~safety.classifiers.features.ids_removed`): ``vector``
        (``text``'s own, shared with the turn) serves when the text has none; else, or
        without it, the text is embedded on the embedding pool (one request). Raises
        :class:`ModerationUnavailable` when no embedding worker answers."""
        return self.classify_prepared(self.prepare(text), vector=vector)

    def classify_prepared(
        self, prepared: Prepared, *, vector: Sequence[float] | None = None
    ) -> Verdict:
        """:meth:`classify` of a text made ready by :meth:`prepare` (another
        ``Prepared`` is read again)."""
        reading = (
            prepared if isinstance(prepared, Reading) else self.prepare(prepared.text)
        )
        if vector is None or reading.read != reading.text:
            vector = self.vectors_embed([reading.read])[0]
        return self._verdict(reading, vector)

    def classify_batch(self, texts: Sequence[str]) -> list[Verdict]:
        """Judge many texts with one embedding request."""
        readings = [self.prepare(t) for t in texts]
        vectors = self.vectors_embed([r.read for r in readings]) if texts else []
        return [self._verdict(r, v) for r, v in zip(readings, vectors, strict=True)]
