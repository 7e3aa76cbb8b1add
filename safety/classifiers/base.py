"""The classifier interface every moderation backend implements, and its result."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from chatsite.errors import ServiceUnavailable
from safety.categories import Category


class ModerationUnavailable(ServiceUnavailable):
    """The moderation backend could not classify the text (no worker, timeout, an
    endpoint down, an answer it could not read). Whether the text then passes (fail
    open) or is refused (fail closed) is ``SAFETY_FAIL_CLOSED`` (:func:`safety.classifiers.classify_text`)."""

    code = "moderation_unavailable"
    message = (
        "Content moderation is unavailable right now, so this message cannot be "
        "sent. Please try again in a moment."
    )


@dataclass(frozen=True)
class Verdict:
    """A backend's judgement of one text.

    ``scores``: every category's score in 0..1 (how sure the backend is that the text
    asks for that harm; 0/1 for backends that only answer yes/no); ``flagged``: the
    categories at or above their threshold, highest score first; ``backend``: who
    judged; ``hazards``: codes the backend reported that are not among our categories
    (e.g. Llama Guard's S6), recorded, never flagged; ``available``: False for the
    fail-open verdict given when the backend was down.
    """

    scores: Mapping[Category, float]
    flagged: tuple[Category, ...]
    backend: str
    hazards: tuple[str, ...] = ()
    available: bool = True
    detail: dict[str, object] = field(default_factory=dict)

    @classmethod
    def from_scores(
        cls,
        scores: Mapping[Category, float],
        *,
        thresholds: Mapping[Category, float],
        backend: str,
        hazards: tuple[str, ...] = (),
        detail: dict[str, object] | None = None,
    ) -> Verdict:
        """Build a verdict flagging each category whose score >= its threshold."""
        full = {c: float(scores.get(c, 0.0)) for c in Category}
        flagged = tuple(
            sorted(
                (c for c in Category if full[c] >= thresholds[c]),
                key=lambda c: -full[c],
            )
        )
        return cls(
            scores=full,
            flagged=flagged,
            backend=backend,
            hazards=hazards,
            detail=detail or {},
        )

    @property
    def is_flagged(self) -> bool:
        """True when at least one category is flagged."""
        return bool(self.flagged)

    @property
    def top(self) -> Category | None:
        """The flagged category with the highest score, or None."""
        return self.flagged[0] if self.flagged else None

    def flagged_at(self, thresholds: Mapping[Category, float]) -> tuple[Category, ...]:
        """The categories flagged under other ``thresholds`` (e.g. the admin's)."""
        return tuple(
            sorted(
                (c for c in Category if self.scores.get(c, 0.0) >= thresholds[c]),
                key=lambda c: -self.scores.get(c, 0.0),
            )
        )


@dataclass(frozen=True)
class Prepared:
    """What a backend computes from a text alone, before its vector is known
    (:meth:`Classifier.prepare`); backends that compute something extend it."""

    text: str


class Classifier(ABC):
    """A moderation backend: text in, :class:`Verdict` out."""

    name = "base"
    # Whether classify() reads the text's embedding: a caller holding a shared
    # TextVector reads it only for such a backend (no embedding for a guard model).
    uses_vector = False

    @abstractmethod
    def classify(self, text: str, *, vector: Sequence[float] | None = None) -> Verdict:
        """Judge ``text``. ``vector``: its 384-d embedding when the caller already has
        it (a turn's shared :class:`inference.embeddings.TextVector`), so it is not
        embedded twice; backends that do not use embeddings ignore it.

        Raises :class:`ModerationUnavailable` when the backend cannot answer.
        """

    def prepare(self, text: str) -> Prepared:
        """The part of judging ``text`` that needs no vector (here: nothing), for
        :meth:`classify_prepared`: a caller waiting for the text's embedding does it
        meanwhile (:meth:`inference.embeddings.TextVector.vector_meanwhile`)."""
        return Prepared(text)

    def classify_prepared(
        self, prepared: Prepared, *, vector: Sequence[float] | None = None
    ) -> Verdict:
        """:meth:`classify` of ``prepared.text``, reusing what :meth:`prepare` made
        (the same verdict). Raises :class:`ModerationUnavailable` like it."""
        return self.classify(prepared.text, vector=vector)

    def vector_text(self, text: str) -> str:
        """The text whose embedding :meth:`classify` reads for ``text`` (``text``
        itself here): a caller's shared vector of ``text`` serves only when this is
        ``text``, else reading it would embed ``text`` for nothing."""
        return text

    def classify_batch(self, texts: Sequence[str]) -> list[Verdict]:
        """Judge many texts (evaluation, ingestion); one verdict per text, in order.

        Raises :class:`ModerationUnavailable` like :meth:`classify`.
        """
        return [self.classify(text) for text in texts]
