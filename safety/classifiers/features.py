"""Input features of the embedded classifier: the sentence embedding plus hashed word
n-grams.

The all-MiniLM-L6-v2 vector says what a text is *about*; word n-grams carry the
*intent* cues it blurs ("so I can", "without getting caught", "how did", "protect").
N-grams are hashed with CRC-32 (stable across processes, unlike ``hash()``) into
``NGRAM_BUCKETS`` binary features, L2-normalised, so serving needs no vocabulary file.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Sequence

import numpy as np

from inference.embeddings import EMBEDDING_DIM

NGRAM_BUCKETS = 4096
# The n-gram vector is divided by at least sqrt(MIN_GRAMS): a text of one or two words
# (one to three n-grams) then weighs less than a sentence instead of putting all its
# weight on one or two hashed buckets, where "secret" or "sys" alone could look like
# the harmful requests sharing that word (or that bucket).
MIN_GRAMS = 8
FEATURE_DIM = EMBEDDING_DIM + NGRAM_BUCKETS

_WORD = re.compile(r"[a-z0-9']+")


def ngram_features(text: str, *, buckets: int = NGRAM_BUCKETS) -> np.ndarray:
    """Return the hashed unigram+bigram vector of ``text`` (``buckets`` floats; unit
    length from ``MIN_GRAMS`` distinct n-grams up, shorter below; all zero for text
    without words)."""
    words = _WORD.findall(text.lower())
    grams = words + [f"{a} {b}" for a, b in zip(words, words[1:], strict=False)]
    out = np.zeros(buckets, dtype=np.float32)
    for gram in grams:
        out[zlib.crc32(gram.encode()) % buckets] = 1.0
    norm = max(float(np.linalg.norm(out)), MIN_GRAMS**0.5)
    return out / norm


def features(text: str, vector: Sequence[float]) -> np.ndarray:
    """Return the classifier's input for one text: its 384-d ``vector`` followed by its
    n-gram features (``FEATURE_DIM`` floats)."""
    return np.concatenate([np.asarray(vector, dtype=np.float32), ngram_features(text)])
