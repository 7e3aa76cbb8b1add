"""Screening of what reaches a prompt by other paths than a typed message, under the
same per-category policies (DESIGN §10, docs/safety.md "Every path screened"):

- :func:`history_screen`: an imported conversation's messages, at import; a flagged
  message is kept but marked and left out of prompts;
- :func:`fact_screen`: a memory fact before it is stored (the hook memory calls,
  MEMORY_FACT_SCREENER): one the user typed is moderated as a typed message (blocked,
  recorded, counted); one the model extracted is dropped when it would be blocked.

Document chunks are screened at ingestion (:func:`safety.documents.chunks_screen`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import User

from safety.classifiers import Verdict
from safety.models import Action, ModerationEvent
from safety.selectors import safety_config
from safety.services import input_moderate, policy_matches, texts_judge

__all__ = ["IMPORT_EVENTS_MAX", "fact_screen", "history_screen"]

logger = logging.getLogger(__name__)

# The most moderation events one import records (one per flagged message up to it):
# a large file of flagged text must not flood the moderation queue.
IMPORT_EVENTS_MAX = 20


def history_screen(*, user: User, texts: Sequence[str]) -> list[str | None]:
    """Judge an imported conversation's ``texts``; return, per text, the category
    code of its highest-scoring blocking match under the policies, or None.

    SAFETY_INPUT_ENABLED off: flags nothing. The texts are classified in batches (one
    embedding request each; texts seen in the last SAFETY_VERDICT_CACHE_S s are read
    from the verdict cache). Records a ``flag`` event (surface ``import``; no abuse
    points: it is history, not a request) for each flagged text, up to
    :data:`IMPORT_EVENTS_MAX`. A backend that is down fails open (nothing flagged,
    logged) or, with SAFETY_FAIL_CLOSED, raises ModerationUnavailable (503): nothing
    is imported.
    """
    if not settings.SAFETY_INPUT_ENABLED or not texts:
        return [None] * len(texts)
    distinct = list(dict.fromkeys(t for t in texts if t.strip()))
    verdicts: dict[str, Verdict] = {}
    for i in range(0, len(distinct), 64):
        part = distinct[i : i + 64]
        verdicts.update(zip(part, texts_judge(texts=part, query=None), strict=True))
    config = safety_config()
    found: dict[str, str | None] = {}
    events: list[ModerationEvent] = []
    for text, verdict in verdicts.items():
        blocking = [
            m
            for m in policy_matches(verdict, config=config)
            if m.action == Action.BLOCK
        ]
        found[text] = blocking[0].category.value if blocking else None
        if blocking and len(events) < IMPORT_EVENTS_MAX:
            events.append(
                ModerationEvent(
                    user=user,
                    surface=ModerationEvent.Surface.IMPORT,
                    direction=ModerationEvent.Direction.INPUT,
                    category=blocking[0].category,
                    score=blocking[0].score,
                    scores={
                        c.value: round(float(s), 4) for c, s in verdict.scores.items()
                    },
                    action=ModerationEvent.EventAction.FLAG,
                    text=text,
                    backend=verdict.backend,
                )
            )
    ModerationEvent.objects.bulk_create(events)
    return [found.get(t) for t in texts]


def fact_screen(*, user_id: int, text: str, typed: bool) -> str | None:
    """Screen a memory fact before it is stored (the MEMORY_FACT_SCREENER hook).

    ``typed``: the user wrote it by hand (the memory page or its API): it is moderated
    as a typed message (:func:`safety.services.input_moderate`, surface ``memory``),
    raising ModerationBlocked (400, recorded, counted as a typed block would be).
    Otherwise (extracted by the model, or a "remember that" of a message already
    screened when it was sent) return the category code of a blocking match (the fact
    is then not stored; no event, no abuse points), or None. SAFETY_INPUT_ENABLED off:
    None. A backend that is down fails open or, failing closed, raises
    ModerationUnavailable (503).
    """
    if not settings.SAFETY_INPUT_ENABLED or not text.strip():
        return None
    if typed:
        user = get_user_model().objects.get(pk=user_id)
        input_moderate(user=user, text=text, surface=ModerationEvent.Surface.MEMORY)
        return None
    (verdict,) = texts_judge(texts=[text], query=None)
    blocking = [
        m
        for m in policy_matches(verdict, config=safety_config())
        if m.action == Action.BLOCK
    ]
    if blocking:
        logger.info(
            "extracted fact of user %s not stored: %s", user_id, blocking[0].category
        )
        return blocking[0].category.value
    return None
