"""Document chunks screened at ingestion for prompt injection in retrieved text: the
hook memory calls (``MEMORY_CHUNK_SCREENER``, default :func:`chunks_screen`). A flagged
chunk is kept out of prompts; nobody is blocked and no event is recorded."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from django.conf import settings

from safety.categories import Category
from safety.classifiers import ModerationUnavailable, classifier_get
from safety.judging import texts_judge
from safety.models import Action
from safety.selectors import safety_config
from safety.services import policy_matches

logger = logging.getLogger(__name__)


def chunks_screen(
    *, texts: Sequence[str], vectors: Sequence[Sequence[float]]
) -> list[tuple[str, float] | None]:
    """Screen document chunks at ingestion; the hook memory calls (MEMORY_CHUNK_SCREENER).

    ``texts``: the chunks; ``vectors``: their 384-d embeddings, already computed for
    retrieval (a backend that reads vectors embeds nothing; others classify the texts
    in one batch). Returns, per chunk, None or ``(category code, score 0..1)``: the
    highest-scoring category of SAFETY_DOCUMENTS_CATEGORIES that matches under the
    admin's policies (:func:`policy_matches`; a category set to ``off`` never flags)
    and reaches its SAFETY_DOCUMENTS_THRESHOLDS floor. The shipped floor for prompt
    injection is 1.0, a rule match (:mod:`safety.classifiers.rules`): the embedded
    model, trained on chat messages, scores technical prose about assistants as
    injection at its chat threshold, and a flagged chunk is lost to retrieval, while
    the rules flag ordinary prose almost never and catch the stereotyped injections
    (docs/safety.md; measured in docs/benchmarks.md).
    Records no event and blocks nobody: the chunk is only kept out of prompts.
    SAFETY_DOCUMENTS_ENABLED off: flags nothing. A backend that is down fails open
    (logged, nothing flagged) or, with SAFETY_FAIL_CLOSED, raises
    :class:`ModerationUnavailable` so the document waits and is retried.
    """
    if not settings.SAFETY_DOCUMENTS_ENABLED or not texts:
        return [None] * len(texts)
    wanted = {Category(c) for c in settings.SAFETY_DOCUMENTS_CATEGORIES}
    classifier = classifier_get()
    try:
        if classifier.uses_vector:
            verdicts = [
                classifier.classify(t, vector=v)
                for t, v in zip(texts, vectors, strict=True)
            ]
        else:
            verdicts = classifier.classify_batch(list(texts))
    except ModerationUnavailable as exc:
        if settings.SAFETY_FAIL_CLOSED:
            raise ModerationUnavailable(
                "Content moderation is unavailable right now, so the document "
                "cannot be checked yet."
            ) from exc
        logger.warning("document chunks not screened (failing open): %s", exc)
        return [None] * len(texts)
    config = safety_config()
    floors = {
        Category(c): float(t)
        for c, t in (settings.SAFETY_DOCUMENTS_THRESHOLDS or {}).items()
    }
    flags: list[tuple[str, float] | None] = []
    for verdict in verdicts:
        matches = [
            m
            for m in policy_matches(verdict, config=config)
            if m.category in wanted and m.score >= floors.get(m.category, 0.0)
        ]
        flags.append(
            (matches[0].category.value, round(matches[0].score, 4)) if matches else None
        )
    return flags


def tool_results_screen(*, texts: Sequence[str]) -> list[str | None]:
    """Screen tool results before they enter a prompt (data, like document chunks).

    Returns, per text, None or the category code of its highest-scoring match: a
    category of SAFETY_DOCUMENTS_CATEGORIES (prompt injection) at its
    SAFETY_DOCUMENTS_THRESHOLDS floor, as for chunks, or any other category whose
    input policy blocks (what a typed message would be refused for). Records no event
    and blocks nobody: the caller replaces a flagged result by a note.
    SAFETY_INPUT_ENABLED off: flags nothing. A backend that is down fails open
    (logged) or, with SAFETY_FAIL_CLOSED, raises :class:`ModerationUnavailable`.
    """
    if not settings.SAFETY_INPUT_ENABLED or not texts:
        return [None] * len(texts)
    verdicts = texts_judge(texts=list(texts), query=None)
    wanted = {Category(c) for c in settings.SAFETY_DOCUMENTS_CATEGORIES}
    floors = {
        Category(c): float(t)
        for c, t in (settings.SAFETY_DOCUMENTS_THRESHOLDS or {}).items()
    }
    config = safety_config()
    flags: list[str | None] = []
    for verdict in verdicts:
        matches = [
            m
            for m in policy_matches(verdict, config=config)
            if (m.category in wanted and m.score >= floors.get(m.category, 0.0))
            or (m.category not in wanted and m.action == Action.BLOCK)
        ]
        flags.append(matches[0].category.value if matches else None)
    return flags
