"""Input moderation classifiers: one interface, backends chosen per deployment.

- ``embedded`` (default): trained on all-MiniLM-L6-v2 embeddings, plus rules
  (:mod:`.embedded`);
- ``guard``: a guard model such as Llama Guard 3 on our inference tier (:mod:`.guard`);
- ``remote``: an OpenAI-compatible ``/v1/moderations`` endpoint (:mod:`.remote`).

``SAFETY_BACKEND`` picks the backend; :func:`classify_text` applies
``SAFETY_FAIL_CLOSED`` when it is down. A named backend also judges the decoded views
of a text (base64, hex, URL-encoding, rot13, leetspeak; ``SAFETY_DECODE_VIEWS``) and,
for ``embedded``, text not in English with the multilingual classifier
(``SAFETY_MULTILINGUAL``): :mod:`.views`.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from django.conf import settings
from django.utils.module_loading import import_string

from safety.categories import Category
from safety.classifiers.base import (
    Classifier,
    ModerationUnavailable,
    Prepared,
    Verdict,
)

__all__ = [
    "BACKENDS",
    "Classifier",
    "ModerationUnavailable",
    "Prepared",
    "Verdict",
    "classifier_get",
    "classify_text",
    "unavailable_verdict",
]

logger = logging.getLogger(__name__)

BACKENDS = ("embedded", "guard", "remote")


def classifier_get(backend: str | None = None) -> Classifier:
    """Return a classifier of ``backend`` (default ``SAFETY_BACKEND``).

    ``backend`` is one of :data:`BACKENDS` (wrapped in
    :class:`~safety.classifiers.views.ViewsClassifier` unless both
    ``SAFETY_DECODE_VIEWS`` and ``SAFETY_MULTILINGUAL`` are off), or the dotted path of
    another :class:`Classifier` subclass (built with no arguments, not wrapped: a
    deployment's own backend, or a test's deterministic one). Raises ``ValueError``
    for an unknown backend name.
    """
    backend = backend or settings.SAFETY_BACKEND
    if "." in backend:
        return import_string(backend)()
    inner: Classifier
    multilingual: Classifier | None = None
    if backend == "embedded":
        from safety.classifiers.embedded import EmbeddedClassifier
        from safety.classifiers.multilingual import (
            MultilingualClassifier,
            multilingual_available,
        )

        inner = EmbeddedClassifier()
        if settings.SAFETY_MULTILINGUAL and multilingual_available():
            multilingual = MultilingualClassifier()
    elif backend == "guard":
        from safety.classifiers.guard import GuardClassifier

        inner = GuardClassifier()
    elif backend == "remote":
        from safety.classifiers.remote import RemoteClassifier

        inner = RemoteClassifier()
    else:
        raise ValueError(f"unknown moderation backend {backend!r}; one of {BACKENDS}")
    if not settings.SAFETY_DECODE_VIEWS and multilingual is None:
        return inner
    from safety.classifiers.views import ViewsClassifier

    return ViewsClassifier(
        inner, multilingual=multilingual, decode=settings.SAFETY_DECODE_VIEWS
    )


def classify_text(
    text: str,
    *,
    vector: Sequence[float] | None = None,
    classifier: Classifier | None = None,
    fail_closed: bool | None = None,
    prepared: Prepared | None = None,
) -> Verdict:
    """Judge ``text``, applying the fail policy when the backend is down.

    ``fail_closed`` defaults to ``SAFETY_FAIL_CLOSED``. Closed: re-raise
    :class:`ModerationUnavailable` (a 503 with a clear message; nothing is sent). Open:
    log a warning and return a verdict that flags nothing with ``available=False``,
    so the caller can let the text through and still record that it was not checked.
    ``prepared``: ``classifier.prepare(text)``, when the caller made it already.
    """
    classifier = classifier or classifier_get()
    if fail_closed is None:
        fail_closed = settings.SAFETY_FAIL_CLOSED
    try:
        if prepared is not None:
            return classifier.classify_prepared(prepared, vector=vector)
        return classifier.classify(text, vector=vector)
    except ModerationUnavailable as exc:
        return unavailable_verdict(exc, classifier=classifier, fail_closed=fail_closed)


def unavailable_reason(exc: ModerationUnavailable) -> str:
    """Why the backend could not judge (the cause's text), for the log: the
    exception's own message is what a user reads when failing closed."""
    return str(exc.__cause__) if exc.__cause__ is not None else exc.message


def unavailable_verdict(
    exc: ModerationUnavailable,
    *,
    classifier: Classifier,
    fail_closed: bool | None = None,
) -> Verdict:
    """Apply the fail policy to a backend that could not judge a text.

    ``fail_closed`` (default ``SAFETY_FAIL_CLOSED``) true: raise ``exc``. False: log a
    warning and return a verdict that flags nothing with ``available=False``.
    """
    if fail_closed is None:
        fail_closed = settings.SAFETY_FAIL_CLOSED
    if fail_closed:
        raise exc
    logger.warning(
        "moderation unavailable (%s); failing open: the text passes unchecked "
        "(SAFETY_FAIL_CLOSED is off)",
        unavailable_reason(exc),
    )
    return Verdict(
        scores=dict.fromkeys(Category, 0.0),
        flagged=(),
        backend=classifier.name,
        available=False,
        detail={"error": exc.message},
    )
