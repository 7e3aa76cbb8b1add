"""Writes of the safety app: input moderation (DESIGN §4.2, §10).

:func:`input_moderate` is called by the gateway's admission
(:func:`gateway.generations.generation_admit`) before anything is reserved, looked up
or enqueued, so the chat page and the API enforce one policy and a blocked request
costs nothing.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass

from django.contrib.auth.models import AbstractBaseUser

from chatsite.errors import ModerationBlocked
from inference.embeddings import EmbeddingUnavailable, TextVector
from safety.categories import Category, category_info
from safety.classifiers import (
    ModerationUnavailable,
    Verdict,
    classifier_get,
    classify_text,
    unavailable_verdict,
)
from safety.models import Action, ModerationEvent
from safety.selectors import SafetyConfig, safety_config

__all__ = ["Match", "ModerationBlocked", "input_moderate", "policy_matches"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Match:
    """A category that matched under its policy: its score (0..1) and action."""

    category: Category
    score: float
    action: str


def policy_matches(verdict: Verdict, *, config: SafetyConfig) -> list[Match]:
    """The categories ``verdict`` matches under the admin's policies, highest score first.

    A policy with a threshold matches when the category's score is at or above it; one
    without uses the backend's own decision (``verdict.flagged``). Categories whose
    action is ``off`` never match.
    """
    matches = []
    for category in Category:
        policy = config.policy(category)
        if policy.action == Action.OFF:
            continue
        score = float(verdict.scores.get(category, 0.0))
        hit = (
            category in verdict.flagged
            if policy.threshold is None
            else score >= policy.threshold
        )
        if hit:
            matches.append(Match(category=category, score=score, action=policy.action))
    return sorted(matches, key=lambda m: -m.score)


def blocked_message(category: Category) -> str:
    """The message a user whose input was blocked in ``category`` sees: which policy,
    what they can do instead, and that nothing was charged."""
    info = category_info(category)
    return (
        "Your message was not sent: it goes against our content policy on "
        f"{category.label.lower()}. {info.user_advice} If you think this is a "
        "mistake, rephrase your message and send it again. Nothing was charged."
    )


def _verdict(*, text: str, query: TextVector | None) -> Verdict:
    """Classify ``text`` with the configured backend, reading the shared vector of
    ``query`` (when it is of ``text``) instead of embedding again; applies the fail
    policy (raises ModerationUnavailable when failing closed)."""
    classifier = classifier_get()
    vector = None
    if query is not None and classifier.uses_vector and query.text == text:
        try:
            vector = query.vector
        except EmbeddingUnavailable as exc:
            logger.warning("no vector for input moderation: %s", exc)
            return unavailable_verdict(ModerationUnavailable(), classifier=classifier)
    try:
        return classify_text(text, vector=vector, classifier=classifier)
    except ModerationUnavailable as exc:
        # failing closed: the user sees the one clear message, not the backend's detail
        raise ModerationUnavailable() from exc


def input_moderate(
    *,
    user: AbstractBaseUser,
    text: str,
    surface: str,
    query: TextVector | None = None,
    conversation_id: uuid.UUID | str | None = None,
    message_id: uuid.UUID | str | None = None,
    job_id: str = "",
) -> Verdict:
    """Screen a user's ``text`` before the gateway spends anything on it.

    ``surface``: a :class:`ModerationEvent.Surface` value (chat / api); ``query``: the
    turn's shared :class:`TextVector` of ``text`` (embedded once per turn: the
    classifier reads its vector instead of embedding again); ``conversation_id``,
    ``message_id``, ``job_id``: what an event refers to, when known.

    Classifies, applies the per-category policies (:func:`policy_matches`) and
    records one :class:`ModerationEvent` when a category matches: ``block`` when any
    matching category blocks (the highest-scoring blocking one), else ``flag`` (the
    highest-scoring one). Returns the verdict when the text may pass. Raises
    :class:`ModerationBlocked` (400 ``content_policy_violation``) on block, and
    :class:`ModerationUnavailable` (503) when the backend is down and
    SAFETY_FAIL_CLOSED is set; failing open, the text passes unchecked (logged).
    """
    verdict = _verdict(text=text, query=query)
    if not verdict.available:
        return verdict
    matches = policy_matches(verdict, config=safety_config())
    if not matches:
        return verdict
    blocking = [m for m in matches if m.action == Action.BLOCK]
    top = blocking[0] if blocking else matches[0]
    action = (
        ModerationEvent.EventAction.BLOCK
        if blocking
        else ModerationEvent.EventAction.FLAG
    )
    ModerationEvent.objects.create(
        user=user,
        surface=surface,
        direction=ModerationEvent.Direction.INPUT,
        category=top.category,
        score=top.score,
        scores={c.value: round(float(s), 4) for c, s in verdict.scores.items()},
        action=action,
        text=text,
        conversation_id=conversation_id,
        message_id=message_id,
        job_id=job_id,
        backend=verdict.backend,
    )
    logger.info(
        "input %s: user %s, %s (%.2f) on %s",
        action,
        user.pk,
        top.category.value,
        top.score,
        surface,
    )
    if blocking:
        raise ModerationBlocked(blocked_message(top.category), category=top.category)
    return verdict
