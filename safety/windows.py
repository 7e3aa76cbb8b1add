"""The window of a conversation that input moderation judges besides its newest
message: the last few user turns joined, so a request split over several messages is
caught (:func:`safety.services.input_moderate`, :func:`safety.services.messages_moderate`).

The window is judged on its joined text (the classifier's word and character n-grams)
with the mean of its turns' own vectors (:func:`window_vector`), not an embedding of
the joined text: each turn was embedded once already (the newest by the turn's shared
vector; the earlier ones when they were sent, kept by :mod:`safety.verdicts`), so the
window costs no embedding, unless the mean's verdict comes near a category
(SAFETY_WINDOW_EMBED_FROM): then the joined text is embedded and judged as before.
What it catches against an embedded window text: ``bench/window_recall.py`` (figures
in ``bench/results/``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

import numpy as np
from django.conf import settings

from inference.embeddings import EmbeddingUnavailable, embed_texts
from safety import verdicts as verdict_cache
from safety.classifiers import (
    Classifier,
    ModerationUnavailable,
    Verdict,
    unavailable_verdict,
)

logger = logging.getLogger(__name__)

# Characters of each message a window keeps (its end: a split request's last part is
# what asks); 3 turns of 300 characters stay within the embedding model's 256 word
# pieces for ordinary prose.
WINDOW_CHARS_PER_TURN = 300


def window_turns(messages: Sequence[dict[str, str]], *, turns: int) -> list[str] | None:
    """The last ``turns`` non-empty user messages of ``messages`` (stripped), oldest
    first, or None when there are fewer than two (the newest alone is screened
    anyway) or ``turns`` is under 2."""
    users = [
        str(m.get("content") or "").strip() for m in messages if m.get("role") == "user"
    ]
    users = [u for u in users if u][-turns:] if turns > 1 else []
    return users if len(users) >= 2 else None


def window_join(turns: Sequence[str]) -> str:
    """The window's text: each of ``turns`` cut to its last
    :data:`WINDOW_CHARS_PER_TURN` characters, joined by newlines."""
    return "\n".join(t[-WINDOW_CHARS_PER_TURN:] for t in turns)


def window_text(messages: Sequence[dict[str, str]], *, turns: int) -> str | None:
    """The last ``turns`` user messages of ``messages`` joined (:func:`window_turns`,
    :func:`window_join`), or None when there are fewer than two."""
    found = window_turns(messages, turns=turns)
    return window_join(found) if found is not None else None


def window_vector(vectors: Sequence[Sequence[float]]) -> list[float]:
    """The window's vector: the mean of its turns' unit ``vectors`` (384-d each),
    scaled back to unit length (all-MiniLM-L6-v2 vectors are compared by dot
    product). Raises ValueError for no vectors."""
    if not vectors:
        raise ValueError("a window needs at least one vector")
    mean = np.asarray(vectors, dtype=np.float32).mean(axis=0)
    norm = float(np.linalg.norm(mean))
    return (mean / norm if norm > 0 else mean).tolist()


def window_judge(
    *,
    turns: Sequence[str],
    classifier: Classifier,
    known: Mapping[str, Sequence[float]] | None = None,
) -> Verdict:
    """Judge the window of ``turns`` (the last user messages, oldest first, as
    :func:`window_turns` returns them) with ``classifier``.

    A backend that reads vectors judges the joined text (:func:`window_join`) with
    :func:`window_vector` of the turns' vectors: ``known`` (text -> 384-d vector, e.g.
    the newest message's shared vector) are kept for the next turns' windows, the
    others read from what earlier turns kept (one Redis round trip for both), and
    those missing (expired, never kept) embedded in one request and kept. When that
    verdict's top score reaches SAFETY_WINDOW_EMBED_FROM, the joined text is embedded
    after all and judged again, and that verdict stands: the mean blurs what a split
    request asks, so it only decides which windows pass without an embedding
    (the level and what the mean alone misses: ``bench/window_recall.py``). Another
    backend judges the joined text alone. The verdict is not cached: a window holds
    the newest message, so it is new on every turn but a regenerate, and a cache
    would cost a round trip on every turn to save one classification (~1 ms).

    Applies the fail policy: failing closed raises :class:`ModerationUnavailable`
    (embedding pool or backend down); failing open returns the unavailable verdict.
    """
    text = window_join(turns)
    try:
        if not classifier.uses_vector:
            return classifier.classify(text)
        vector = window_vector(_turn_vectors(turns, known=known or {}))
        verdict = classifier.classify(text, vector=vector)
        if (
            max(verdict.scores.values(), default=0.0)
            >= settings.SAFETY_WINDOW_EMBED_FROM
        ):
            (vector,) = texts_embed([text])
            verdict = classifier.classify(text, vector=vector)
    except ModerationUnavailable as exc:
        try:
            return unavailable_verdict(exc, classifier=classifier)
        except ModerationUnavailable as closed:  # the one clear message, no detail
            raise ModerationUnavailable() from closed
    return verdict


def turn_keep(known: Mapping[str, Sequence[float]]) -> None:
    """Keep the vectors of ``known`` (a conversation's first user turn: text -> 384-d
    vector) for the next turns' windows when SAFETY_WINDOW_TURNS is over 1 (one Redis
    round trip; nothing when ``known`` is empty)."""
    if known and settings.SAFETY_WINDOW_TURNS > 1:
        verdict_cache.vectors_exchange(store=known, fetch=[])


def _turn_vectors(
    turns: Sequence[str], *, known: Mapping[str, Sequence[float]]
) -> list[Sequence[float]]:
    """The vector of each of ``turns``: ``known``, kept, or embedded now (and kept).
    Raises ModerationUnavailable when one must be embedded and cannot be."""
    others = [t for t in dict.fromkeys(turns) if t not in known]
    found: dict[str, Sequence[float]] = dict(known)
    kept = verdict_cache.vectors_exchange(store=known, fetch=others)
    found.update((t, v) for t, v in zip(others, kept, strict=True) if v is not None)
    missing = [t for t in others if t not in found]
    if missing:
        fresh = dict(zip(missing, texts_embed(missing), strict=True))
        verdict_cache.vectors_exchange(store=fresh, fetch=[])
        found.update(fresh)
    return [found[t] for t in turns]


def texts_embed(texts: Sequence[str]) -> list[list[float]]:
    """Embed ``texts`` in one request (:func:`inference.embeddings.embed_texts`): one
    384-d vector per text. Raises :class:`ModerationUnavailable` when no embedding
    worker answers."""
    try:
        return embed_texts(list(texts)).vectors
    except EmbeddingUnavailable as exc:
        raise ModerationUnavailable(
            f"Content moderation is unavailable right now: {exc}"
        ) from exc
