"""A classifier that also judges a text's decoded views and, for text not in
English, asks a multilingual second model: the highest score per category wins.

``ViewsClassifier(inner)`` judges the text with ``inner`` (the configured backend),
then each second view of :func:`safety.classifiers.normalize.text_views` (base64,
hex, URL-encoding or rot13 decoded, leetspeak spelled out) with ``inner`` too, in one
batch, and, when a ``multilingual`` classifier is given and the text (or a view)
is not English (:func:`safety.classifiers.multilingual.looks_english`), that text
with the multilingual classifier. Ordinary English text has no second view and
costs exactly what ``inner`` costs. The merged :class:`Verdict` carries the highest
score per category, every category any judge flagged, and in ``detail["views"]``
which view flagged what (``{"leet": ["weapons"]}``), for staff reading the event.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from safety.categories import Category
from safety.classifiers.base import Classifier, Prepared, Verdict
from safety.classifiers.normalize import text_views


def verdicts_merge(base: Verdict, others: Sequence[tuple[str, Verdict]]) -> Verdict:
    """Merge ``base`` (the text's own verdict) with the verdicts of its views
    (``(view name, verdict)``): per category the highest score; flagged = every
    category any verdict flagged, highest merged score first. ``detail`` is base's,
    plus ``views`` naming what each view flagged (only views that flagged)."""
    if not others:
        return base
    scores = {
        c: max(
            [float(base.scores.get(c, 0.0))] + [v.scores.get(c, 0.0) for _, v in others]
        )
        for c in Category
    }
    flagged_set = set(base.flagged)
    views: dict[str, list[str]] = {}
    for name, verdict in others:
        flagged_set.update(verdict.flagged)
        if verdict.flagged:
            views[name] = [c.value for c in verdict.flagged]
    detail = dict(base.detail)
    if views:
        detail["views"] = views
    return Verdict(
        scores=scores,
        flagged=tuple(sorted(flagged_set, key=lambda c: -scores[c])),
        backend=base.backend,
        hazards=tuple(
            dict.fromkeys(base.hazards + sum((v.hazards for _, v in others), ()))
        ),
        available=base.available and all(v.available for _, v in others),
        detail=detail,
    )


@dataclass(frozen=True, eq=False)
class ViewsPrepared(Prepared):
    """A text's preparation for :class:`ViewsClassifier`: ``inner``'s, and the
    second views to judge (``(view name, judge, view text)``)."""

    inner: Prepared
    views: list[tuple[str, str, str]]


class ViewsClassifier(Classifier):
    """See the module docstring. ``name`` and ``uses_vector`` are ``inner``'s, so
    the verdict cache and a caller's shared vector work as for ``inner`` alone."""

    def __init__(
        self,
        inner: Classifier,
        *,
        multilingual: Classifier | None = None,
        decode: bool = True,
    ) -> None:
        self.inner = inner
        self.multilingual = multilingual
        self.decode = decode
        self.name = inner.name
        self.uses_vector = inner.uses_vector

    def _second(self, texts: Sequence[str]) -> list[list[tuple[str, str, str]]]:
        """Per text: ``(view name, judge, view text)`` to classify besides the text
        itself; judge ``inner`` or ``multilingual``."""
        from safety.classifiers.multilingual import looks_english

        out: list[list[tuple[str, str, str]]] = []
        for text in texts:
            views = text_views(text) if self.decode else []
            todo = [(name, "inner", view) for name, view in views]
            if self.multilingual is not None:
                todo += [
                    (
                        f"{name}+multilingual" if name else "multilingual",
                        "multilingual",
                        t,
                    )
                    for name, t in [("", text)] + [(n, v) for n, _, v in todo]
                    if not looks_english(t)
                ]
            out.append(todo)
        return out

    def _judge(
        self, bases: Sequence[Verdict], todo: list[list[tuple[str, str, str]]]
    ) -> list[Verdict]:
        judged: dict[tuple[str, str], Verdict] = {}
        for judge, classifier in (
            ("inner", self.inner),
            ("multilingual", self.multilingual),
        ):
            wanted = list(
                dict.fromkeys(t for views in todo for _, j, t in views if j == judge)
            )
            if wanted and classifier is not None:
                judged.update(
                    ((judge, t), v)
                    for t, v in zip(
                        wanted, classifier.classify_batch(wanted), strict=True
                    )
                )
        return [
            verdicts_merge(base, [(name, judged[(j, t)]) for name, j, t in views])
            for base, views in zip(bases, todo, strict=True)
        ]

    def vector_text(self, text: str) -> str:
        """``inner``'s (the vector ``classify`` passes on is read by ``inner``)."""
        return self.inner.vector_text(text)

    def prepare(self, text: str) -> ViewsPrepared:
        """``inner``'s preparation of ``text`` and its second views (no vector)."""
        return ViewsPrepared(
            text=text, inner=self.inner.prepare(text), views=self._second([text])[0]
        )

    def classify(self, text: str, *, vector: Sequence[float] | None = None) -> Verdict:
        """Judge ``text`` and its views (see the module docstring); raises
        :class:`~safety.classifiers.base.ModerationUnavailable` like ``inner``."""
        return self.classify_prepared(self.prepare(text), vector=vector)

    def classify_prepared(
        self, prepared: Prepared, *, vector: Sequence[float] | None = None
    ) -> Verdict:
        """:meth:`classify` of a text made ready by :meth:`prepare` (another
        ``Prepared`` is prepared again)."""
        if not isinstance(prepared, ViewsPrepared):
            prepared = self.prepare(prepared.text)
        base = self.inner.classify_prepared(prepared.inner, vector=vector)
        return self._judge([base], [prepared.views])[0]

    def classify_batch(self, texts: Sequence[str]) -> list[Verdict]:
        """Judge many texts; all views of all texts in one batch per judge."""
        bases = self.inner.classify_batch(texts)
        return self._judge(bases, self._second(texts))
