"""A short-lived Redis cache of classifier verdicts, keyed by the text's hash.

An API client sends its whole conversation on every call, and every message of it is
screened (:func:`safety.services.messages_moderate`): without a cache the unchanged
history would be classified again on each call (one embedding per message). The cache
keeps the *scores* (not the policy's decision), so an admin's threshold or action
change still applies at once; SAFETY_VERDICT_CACHE_S bounds how long a retrained model
or a changed backend threshold takes to reach a cached text. A verdict given while the
backend was down (fail open) is never stored.

It also keeps the embeddings of users' messages for a while (:func:`vectors_exchange`),
so the window of the last user turns is judged without embedding them again.

Keys (this app owns them): ``safety:verdict:{backend}:{sha256 of the text}``, a JSON
string ``{"scores": {category: score}, "flagged": [...], "hazards": [...]}``;
``safety:vector:{sha256 of the text}``, the text's vector
(:func:`inference.vectors.vectors_encode`, one row).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping, Sequence

import redis
from django.conf import settings

from inference import keys
from inference.connections import redis_sync
from inference.embedding_model import EMBEDDING_DIM
from inference.vectors import vectors_decode, vectors_encode
from safety.categories import Category
from safety.classifiers import Verdict

logger = logging.getLogger(__name__)


def verdict_key(*, backend: str, text: str) -> str:
    """Return the cache key of ``text``'s verdict by ``backend``."""
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    return keys.verdict_key(backend, digest)


def verdicts_cached(*, backend: str, texts: Sequence[str]) -> list[Verdict | None]:
    """Return the cached verdict of each text (None where there is none).

    One Redis round trip (MGET). Redis being down reads as a miss (logged): the texts
    are then classified as if never seen.
    """
    if settings.SAFETY_VERDICT_CACHE_S <= 0 or not texts:
        return [None] * len(texts)
    try:
        raw = keys.mget_all(
            redis_sync(), [verdict_key(backend=backend, text=t) for t in texts]
        )
    except redis.RedisError as exc:
        logger.warning("verdict cache unavailable: %s", exc)
        return [None] * len(texts)
    out: list[Verdict | None] = []
    for value in raw:
        if value is None:
            out.append(None)
            continue
        try:
            data = json.loads(value)
            out.append(
                Verdict(
                    scores={Category(c): float(s) for c, s in data["scores"].items()},
                    flagged=tuple(Category(c) for c in data["flagged"]),
                    backend=backend,
                    hazards=tuple(data.get("hazards", ())),
                    detail={"cached": True},
                )
            )
        except (ValueError, KeyError, TypeError):  # an older format: a miss
            out.append(None)
    return out


def verdicts_store(
    *,
    texts: Sequence[str],
    verdicts: Sequence[Verdict],
    vectors: Mapping[str, Sequence[float]] | None = None,
) -> None:
    """Cache each available verdict for SAFETY_VERDICT_CACHE_S seconds and keep each
    of ``vectors`` (text -> 384-d vector: a first turn's own, for the next turns'
    windows, as :func:`vectors_exchange` keeps them) for SAFETY_WINDOW_VECTOR_S
    seconds, in one pipeline (one round trip).

    Fail-open verdicts (``available`` false) are skipped; Redis errors are logged.
    """
    ttl = settings.SAFETY_VERDICT_CACHE_S
    keep_s = settings.SAFETY_WINDOW_VECTOR_S
    try:
        pipe = redis_sync().pipeline(transaction=False)
        for text, verdict in zip(texts, verdicts, strict=True):
            if ttl <= 0 or not verdict.available:
                continue
            value = {
                "scores": {
                    c.value: round(float(s), 6) for c, s in verdict.scores.items()
                },
                "flagged": [c.value for c in verdict.flagged],
                "hazards": list(verdict.hazards),
            }
            pipe.set(
                verdict_key(backend=verdict.backend, text=text),
                json.dumps(value),
                ex=ttl,
            )
        for text, vector in (vectors or {}).items():
            if keep_s > 0:
                pipe.set(vector_key(text), vectors_encode([vector]), ex=keep_s)
        if len(pipe):
            pipe.execute()
    except redis.RedisError as exc:
        logger.warning("verdict cache unavailable: %s", exc)


def vector_key(text: str) -> str:
    """Return the key of ``text``'s kept embedding (``safety:vector:{sha256}``)."""
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    return keys.vector_key(digest)


def vectors_exchange(
    *, store: Mapping[str, Sequence[float]], fetch: Sequence[str]
) -> list[list[float] | None]:
    """Keep the vectors of ``store`` (text -> 384-d vector) for
    SAFETY_WINDOW_VECTOR_S seconds and read the kept vectors of ``fetch`` (None where
    there is none), in one Redis round trip: the window of the last user turns reads
    its earlier turns' vectors instead of embedding them again
    (:func:`safety.windows.window_judge`). Stored as :func:`inference.vectors.vectors_encode`
    text. Redis being down reads as misses and keeps nothing (logged)."""
    ttl = settings.SAFETY_WINDOW_VECTOR_S
    if ttl <= 0:
        return [None] * len(fetch)
    try:
        pipe = redis_sync().pipeline(transaction=False)
        for text, vector in store.items():
            pipe.set(vector_key(text), vectors_encode([vector]), ex=ttl)
        if fetch:
            for text in fetch:  # GETs, not one MGET: the keys are in many slots
                pipe.get(vector_key(text))
        answers = pipe.execute()
        raw = answers[len(store) :]
    except redis.RedisError as exc:
        logger.warning("vector cache unavailable: %s", exc)
        return [None] * len(fetch)
    out: list[list[float] | None] = []
    for value in raw:
        try:
            out.append(
                vectors_decode(value, count=1, dim=EMBEDDING_DIM)[0] if value else None
            )
        except ValueError:  # another dimension: a miss
            out.append(None)
    return out
