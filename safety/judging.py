"""Judging texts for input moderation: a text with the turn's shared vector, many
texts at once through the verdict cache (:mod:`safety.verdicts`). The policies and
the events are :mod:`safety.services`'."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Collection

from django.conf import settings

from inference.embeddings import EmbeddingUnavailable, TextVector
from safety import verdicts as verdict_cache
from safety.classifiers import (
    ModerationUnavailable,
    Verdict,
    classifier_get,
    classify_text,
    unavailable_verdict,
)
from safety.windows import texts_embed, turn_keep

logger = logging.getLogger(__name__)


def verdict_shared(
    *, text: str, query: TextVector | None, keep_query: bool = False
) -> Verdict:
    """Judge a turn's ``text``: its cached verdict (:mod:`safety.verdicts`, one
    MGET; no vector needed), else :func:`verdict_fresh`, cached for the next time.
    ``keep_query``: also keep the vector ``query`` has (a first turn's, for the next
    turns' windows, :func:`safety.windows.turn_keep`), written with a new verdict in
    one round trip; not when the verdict is unavailable (fail open).

    A cached verdict is returned as a fresh one (no ``cached`` mark): a chat turn is
    a new message each time, so a flag-only match records its event again, as it
    did before the cache (the mark keeps an API client's unchanged history from
    doing so, :func:`safety.services.messages_moderate`)."""
    classifier = classifier_get()
    [cached] = verdict_cache.verdicts_cached(backend=classifier.name, texts=[text])
    if cached is not None:
        if keep_query:
            turn_keep(query_vectors(query))
        return dataclasses.replace(cached, detail={})
    verdict = verdict_fresh(text=text, query=query)
    verdict_cache.verdicts_store(
        texts=[text],
        verdicts=[verdict],
        vectors=_kept(query) if keep_query and verdict.available else None,
    )
    return verdict


def _kept(query: TextVector | None) -> dict[str, list[float]]:
    """The vector of ``query`` to keep for the next turns' windows
    (:func:`query_vectors`), or nothing when no window is judged
    (SAFETY_WINDOW_TURNS under 2)."""
    return query_vectors(query) if settings.SAFETY_WINDOW_TURNS > 1 else {}


def verdict_fresh(*, text: str, query: TextVector | None) -> Verdict:
    """Classify ``text`` with the configured backend, reading the shared vector of
    ``query`` (when it is of ``text`` and the backend reads ``text``'s own vector:
    :meth:`~safety.classifiers.Classifier.vector_text`; a text with an id is embedded
    without it, once) instead of embedding again, doing the part of the judging that
    needs no vector (:meth:`~safety.classifiers.Classifier.prepare`) while the
    vector is made; applies the fail policy (raises ModerationUnavailable when
    failing closed)."""
    classifier = classifier_get()
    vector = None
    prepared = None
    if (
        query is not None
        and classifier.uses_vector
        and query.text == text
        and classifier.vector_text(text) == text
    ):
        try:
            # what needs no vector is judged while the worker embeds the text
            vector, prepared = query.vector_meanwhile(lambda: classifier.prepare(text))
        except EmbeddingUnavailable as exc:
            logger.warning("no vector for input moderation: %s", exc)
            return unavailable_verdict(ModerationUnavailable(), classifier=classifier)
    try:
        return classify_text(
            text, vector=vector, classifier=classifier, prepared=prepared
        )
    except ModerationUnavailable as exc:
        # failing closed: the user sees the one clear message, not the backend's detail
        raise ModerationUnavailable() from exc


def query_vectors(query: TextVector | None) -> dict[str, list[float]]:
    """The vector ``query`` already has, keyed by its stripped text (as
    :func:`safety.windows.window_turns` gives the turns), or nothing."""
    if query is None or query.error is not None:
        return {}
    vector = query.embedded
    return {query.text.strip(): vector} if vector is not None else {}


def texts_judge(
    *,
    texts: list[str],
    query: TextVector | None,
    keep: Collection[str] = (),
    keep_query: bool = False,
) -> list[Verdict]:
    """Judge each of ``texts``: cached verdicts first (:mod:`safety.verdicts`), then
    the text of ``query`` with its shared vector, then the rest in one batch (one
    embedding request: with ``keep``, embedded here and each judged with its vector);
    new verdicts are cached. The vectors of the texts that,
    stripped, are in ``keep`` (the window's turns) are kept for
    :func:`safety.windows.window_judge`; ``keep_query``: the vector ``query`` has
    too (:func:`verdict_shared`), written with the new verdicts in one round trip.
    Applies the fail policy (raises
    ModerationUnavailable when failing closed; failing open, the unjudged texts get
    an unavailable verdict)."""
    classifier = classifier_get()
    results: list[Verdict | None] = list(
        verdict_cache.verdicts_cached(backend=classifier.name, texts=texts)
    )
    fresh: dict[int, Verdict] = {}
    todo = [i for i, v in enumerate(results) if v is None]
    shared = [
        i
        for i in todo
        if query is not None and classifier.uses_vector and texts[i] == query.text
    ]
    try:
        for i in shared:
            fresh[i] = verdict_fresh(text=texts[i], query=query)
        rest = [i for i in todo if i not in fresh]
        if rest and classifier.uses_vector and keep:
            vectors = texts_embed([texts[i] for i in rest])
            verdict_cache.vectors_exchange(
                store={
                    texts[i].strip(): v
                    for i, v in zip(rest, vectors, strict=True)
                    if texts[i].strip() in keep
                },
                fetch=[],
            )
            for i, vector in zip(rest, vectors, strict=True):
                fresh[i] = classifier.classify(texts[i], vector=vector)
        elif rest:
            batch = classifier.classify_batch([texts[i] for i in rest])
            fresh.update(zip(rest, batch, strict=True))
    except ModerationUnavailable as exc:
        try:
            down = unavailable_verdict(exc, classifier=classifier)
        except ModerationUnavailable as closed:  # the one clear message, no detail
            raise ModerationUnavailable() from closed
        fresh.update((i, down) for i in todo if i not in fresh)
    for i, verdict in fresh.items():
        results[i] = verdict
    verdict_cache.verdicts_store(
        texts=[texts[i] for i in fresh],
        verdicts=list(fresh.values()),
        vectors=_kept(query) if keep_query else None,
    )
    return [v for v in results if v is not None]
