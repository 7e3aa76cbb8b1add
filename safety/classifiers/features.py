"""Input features of the embedded classifier: the sentence embedding, hashed word
n-grams, hashed character n-grams, and similarities to labelled exemplars, all of the
text without its ids (:func:`ids_removed`).

The all-MiniLM-L6-v2 vector says what a text is *about*; word n-grams carry the
*intent* cues it blurs ("so I can", "without getting caught", "how did", "protect");
character n-grams (3 to 5 characters inside and across word boundaries) carry the same
cues through typos, inflections and run-together words ("metamphetamine", "hak into",
"kil myself"). Both are hashed with CRC-32 (stable across processes, unlike ``hash()``)
into ``NGRAM_BUCKETS`` and ``CHAR_BUCKETS`` binary features, L2-normalised, so serving
needs no vocabulary file.

Exemplar similarities (:func:`exemplar_similarities`) give, for each group of labelled
training examples (each harmful category, the other benign examples, everyday chat),
the mean cosine similarity of the text to its ``EXEMPLAR_K`` nearest members: a
nearest-neighbour vote that a linear model over the vector alone cannot express (a
request close to three known methods of self-harm, or to three history questions).
In cross-validation they raised mean out-of-fold recall from 0.87 to 0.90 at the same
false-positive budget (``safety/data/README.md``).
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from inference.embeddings import EMBEDDING_DIM
from safety.categories import Category

NGRAM_BUCKETS = 4096
CHAR_BUCKETS = 4096
# Character n-gram lengths (inclusive).
CHAR_MIN, CHAR_MAX = 3, 5
# The n-gram vectors are divided by at least sqrt(MIN_GRAMS): a text of one or two words
# (one to three n-grams) then weighs less than a sentence instead of putting all its
# weight on one or two hashed buckets, where "secret" or "sys" alone could look like
# the harmful requests sharing that word (or that bucket).
MIN_GRAMS = 8
TEXT_FEATURE_DIM = EMBEDDING_DIM + NGRAM_BUCKETS + CHAR_BUCKETS
# Nearest exemplars averaged per group, and the weight of the similarity features
# against the unit-length blocks above; both chosen by cross-validation on the training
# set (k 1, 3 and 5 and weights 2 and 5 were within 0.01 of mean recall).
EXEMPLAR_K = 3
EXEMPLAR_SCALE = 2.0

_WORD = re.compile(r"[a-z0-9']+")
# Identifiers a message may carry whatever it asks (issue 24: "Count to five 3f9a" was
# refused as fraud): each becomes one placeholder word before the n-grams are hashed,
# so an id, a hash or a number adds the same few n-grams whatever its digits. Applied
# in order; the sentence embedding still reads the raw text.
_PLACEHOLDERS = (
    (re.compile(r"(?:https?|ftp)://\S+|www\.\S+", re.I), " xurl "),
    (
        re.compile(
            r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.I
        ),
        " xuuid ",
    ),
    (
        re.compile(r"(?:\b[a-z]:\\|(?<![\w/])~?\.{0,2}/)[\w.\\/-]*[\w/]", re.I),
        " xpath ",
    ),
    (re.compile(r"\b(?=[a-z]*\d)(?=\d*[a-z])[0-9a-f]{4,}\b", re.I), " xhex "),
    (re.compile(r"\d+"), "0"),
)


# Ids a message may carry, removed before the text is embedded (``ids_removed``): a
# URL, a UUID, a file path, a token of 4+ hex digits mixing letters and digits (a
# git hash, "3f9a"), a token with 5+ digits ("884120"), a number after "#" or a word
# that names an id ("#12", "ticket 48", "Order no. QZ-884", "ID42"), or 3+ digits
# after letters ("QZ-884"), a number of 4+ digits that starts or ends the text; a
# year inside a sentence ("in 1984 the") or "2,340" stays.
_IDS = (
    _PLACEHOLDERS[0][0],
    _PLACEHOLDERS[1][0],
    _PLACEHOLDERS[2][0],
    re.compile(r"\b(?=[a-z]*\d)(?=\d*[a-z])[0-9a-f]{4,}\b", re.I),
    re.compile(
        r"\b(?:order|ticket|ref|id|invoice|case|issue|pr)\s*+(?:no\.\s*+)?#?\s*+"
        r"(?:[a-z]{1,4}-?)?\d[\w.-]*"
        r"|\b(?:id|ref)\d[\w.-]*|#\s*+[a-z]{0,4}-?\d[\w.-]*"
        r"|(?<![\w.-])[\w.-]*\d{5,}[\w.-]*|\b[a-z]+-?\d{3,}[\w.-]*"
        r"|^\s*\d{4,}\b|\b\d{4,}\s*$",
        re.I,
    ),
)
# Separators left at the start ("ID42: text") or the end ("text -- ID42") of a text
# whose id was cut off. A token with 5+ digits is matched from its first character
# only and runs of spaces are not given back (``*+``): each pattern reads a text
# once, in time linear in its length (unanchored, "[\w.-]*\d{5,}" tried every start
# in a 40,000-letter word, and "\s*(?:--)?\s*$" every split of a run of spaces:
# seconds to minutes of the web's CPU, holding the GIL, for one message).
_LEAD = re.compile(r"^\s*+:?\s*+")


def _trail_cut(text: str) -> str:
    """``text`` without the spaces, "--" and spaces that end it."""
    text = text.rstrip()
    return text[:-2].rstrip() if text.endswith("--") else text


def _id_spans(text: str) -> list[tuple[int, int]]:
    spans = sorted(m.span() for p in _IDS for m in p.finditer(text) if m.group())
    merged: list[tuple[int, int]] = []
    for a, b in spans:
        if merged and a <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(b, merged[-1][1]))
        else:
            merged.append((a, b))
    return merged


def ids_removed(text: str) -> str:
    """Return ``text`` without its ids (URLs, UUIDs, paths, hex ids, long numbers and
    numbered tokens, see ``_IDS``) and the separator that joined one at either end
    ("ID42: ", " -- 3f9a"), the spaces around one inside a line made one; ``text``
    itself when it has none (or nothing else). The classifier embeds and reads this
    text, so an id added to a message changes neither its vector nor its n-grams
    (issue 24: "Count to five 3f9a" was refused as fraud)."""
    out = text
    for a, b in reversed(_id_spans(text)):
        left, right = out[:a], out[b:]
        if not left.strip():
            left, right = "", _LEAD.sub("", right)
        elif not right.strip():
            left, right = _trail_cut(left), ""
        else:
            left, right = left.rstrip(" \t"), right.lstrip(" \t")
            if (
                left
                and not left.endswith("\n")
                and not right.startswith(("\n", ".", ",", ";", ":", "?", "!", ")"))
            ):
                left += " "
        out = left + right
    return out if out.strip() else text


def text_normalise(text: str) -> str:
    """Return ``text`` lower-cased with URLs, UUIDs, file paths, hex ids (4+ hex digits
    mixing letters and digits) and digit runs replaced by placeholders (``xurl``,
    ``xuuid``, ``xpath``, ``xhex``, ``0``): the input of the n-gram features."""
    for pattern, placeholder in _PLACEHOLDERS:
        text = pattern.sub(placeholder, text)
    return text.lower()


def _hashed(grams: Sequence[str], buckets: int) -> np.ndarray:
    out = np.zeros(buckets, dtype=np.float32)
    for gram in grams:
        out[zlib.crc32(gram.encode()) % buckets] = 1.0
    norm = max(float(np.linalg.norm(out)), MIN_GRAMS**0.5)
    return out / norm


def ngram_features(text: str, *, buckets: int = NGRAM_BUCKETS) -> np.ndarray:
    """Return the hashed unigram+bigram vector of ``text`` (:func:`text_normalise`d;
    ``buckets`` floats; unit
    length from ``MIN_GRAMS`` distinct n-grams up, shorter below; all zero for text
    without words)."""
    words = _WORD.findall(text_normalise(text))
    grams = words + [f"{a} {b}" for a, b in zip(words, words[1:], strict=False)]
    return _hashed(grams, buckets)


def char_ngram_features(text: str, *, buckets: int = CHAR_BUCKETS) -> np.ndarray:
    """Return the hashed character n-gram vector of ``text`` (``CHAR_MIN`` to
    ``CHAR_MAX`` characters of its lower-cased words joined by single spaces, with a
    space at each end; ``buckets`` floats, normalised as :func:`ngram_features`)."""
    joined = " " + " ".join(_WORD.findall(text_normalise(text))) + " "
    grams = [
        joined[i : i + n]
        for n in range(CHAR_MIN, CHAR_MAX + 1)
        for i in range(len(joined) - n + 1)
    ]
    return _hashed(grams, buckets)


def text_grams(text: str) -> np.ndarray:
    """Return ``text``'s word then character n-gram features (``NGRAM_BUCKETS`` +
    ``CHAR_BUCKETS`` floats): the part of :func:`features` that needs no vector."""
    return np.concatenate([ngram_features(text), char_ngram_features(text)])


def features(
    text: str, vector: Sequence[float], *, grams: np.ndarray | None = None
) -> np.ndarray:
    """Return the text part of the classifier's input: its 384-d ``vector``, then its
    word and character n-gram features (``TEXT_FEATURE_DIM`` floats). ``grams``:
    :func:`text_grams` of ``text``, when computed already."""
    grams = text_grams(text) if grams is None else grams
    return np.concatenate([np.asarray(vector, dtype=np.float32), grams])


def exemplar_groups(members: np.ndarray) -> list[np.ndarray]:
    """The bank rows of each group of ``members`` (m x g bool): g arrays of row
    indices, ascending."""
    return [np.flatnonzero(members[:, g]) for g in range(members.shape[1])]


def exemplar_similarities(
    vectors: np.ndarray,
    bank: np.ndarray,
    members: np.ndarray,
    *,
    exclude: np.ndarray | None = None,
    k: int = EXEMPLAR_K,
    groups: Sequence[np.ndarray] | None = None,
) -> np.ndarray:
    """Return, for each row of ``vectors`` (n x 384, unit length), the mean cosine
    similarity to its ``k`` most similar rows of ``bank`` (m x 384, unit length) in each
    group of ``members`` (m x g bool: row i of the bank belongs to group j): an n x g
    float32 array. ``exclude`` (n ints, optional) names for each query one bank row to
    leave out (itself, when the bank is the training set: leave-one-out). A group with
    fewer than ``k`` members averages what it has; an empty one gives 0. ``groups``:
    :func:`exemplar_groups` of ``members``, for a caller that serves many queries
    (the same result; each query then skips g scans of the m-row mask).
    """
    sims = np.asarray(vectors, dtype=np.float32) @ np.asarray(bank, np.float32).T
    if exclude is not None:
        sims[np.arange(len(sims)), exclude] = -1.0
    rows = exemplar_groups(members) if groups is None else groups
    out = np.zeros((len(sims), len(rows)), dtype=np.float32)
    for g, index in enumerate(rows):
        member = sims[:, index]
        if member.shape[1] == 0:
            continue
        top = min(k, member.shape[1])
        # sum / top: what .mean() computes, without its per-call Python overhead
        out[:, g] = np.partition(member, -top, axis=1)[:, -top:].sum(axis=1) / top
    return out


def heads_score(
    x: np.ndarray,
    gate_w: np.ndarray,
    gate_b: float,
    cat_w: np.ndarray,
    cat_b: np.ndarray,
) -> np.ndarray:
    """Per-category scores (n x categories, 0..1) of inputs ``x`` (n x d) under a gate
    and category heads: the gate's probability times each head's share of the
    strongest head."""
    gate = 1.0 / (1.0 + np.exp(-(x @ gate_w + gate_b)))
    q = 1.0 / (1.0 + np.exp(-(x @ cat_w.T + cat_b)))
    return np.asarray(
        gate[:, None] * q / np.maximum(q.max(axis=1, keepdims=True), 1e-9)
    )


class HeadWeights:
    """The learned weights of a model file (``.npz`` arrays ``categories``, ``gate_w``,
    ``gate_b``, ``cat_w``, ``cat_b``, ``thresholds``, ``exemplars``,
    ``exemplar_members``), shared by the embedded and the multilingual models."""

    def __init__(self, arrays: Any) -> None:
        self.categories = [Category(c) for c in arrays["categories"]]
        self.gate_w = np.asarray(arrays["gate_w"], dtype=np.float32)
        self.gate_b = float(arrays["gate_b"])
        self.cat_w = np.asarray(arrays["cat_w"], dtype=np.float32)
        self.cat_b = np.asarray(arrays["cat_b"], dtype=np.float32)
        self.thresholds = {
            c: float(t)
            for c, t in zip(self.categories, arrays["thresholds"], strict=True)
        }
        # Held as the view of a 384 x m C-order array: the product of one query with
        # it (``vector @ exemplars.T``) then runs OpenBLAS's row-major gemv, which
        # took half the CPU of the transposed one over m x 384 rows (1.4 vs 2.7 ms
        # for 24,804 exemplars, bench/results/2026-12-05-modmiss.md). Same values.
        bank = np.asarray(arrays["exemplars"], dtype=np.float32)
        self.exemplars = np.ascontiguousarray(bank.T).T
        self.exemplar_members = np.asarray(arrays["exemplar_members"], dtype=bool)
        self.exemplar_groups = exemplar_groups(self.exemplar_members)

    def exemplar_sims(self, vectors: np.ndarray) -> np.ndarray:
        """:func:`exemplar_similarities` of ``vectors`` (n x 384) to these exemplars."""
        return exemplar_similarities(
            vectors,
            self.exemplars,
            self.exemplar_members,
            groups=self.exemplar_groups,
        )

    def head_scores(self, x: np.ndarray) -> np.ndarray:
        """:func:`heads_score` of inputs ``x`` (n x d) under these weights."""
        return heads_score(x, self.gate_w, self.gate_b, self.cat_w, self.cat_b)
