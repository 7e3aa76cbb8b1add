"""The remote backend: an OpenAI-compatible ``POST {base}/moderations`` endpoint.

Request ``{"model": ..., "input": [texts]}``; each result's ``category_scores`` (0..1,
OpenAI's category names) are mapped to ours through
:data:`safety.categories.OPENAI_CATEGORY` (a category takes the highest score of the
names mapped to it) and thresholded at ``REMOTE_THRESHOLD``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import httpx
from django.conf import settings

from safety.categories import OPENAI_CATEGORY, Category
from safety.classifiers.base import Classifier, ModerationUnavailable, Verdict

# OpenAI's own ``flagged`` cut-off is not published per category; 0.5 on its
# calibrated scores is the usual default.
REMOTE_THRESHOLD = 0.5


class RemoteClassifier(Classifier):
    """Classify on a remote ``/v1/moderations`` endpoint (see module docstring)."""

    name = "remote"

    def __init__(
        self,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        model: str | None = None,
        timeout_s: float | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.base_url = (base_url or settings.SAFETY_REMOTE_URL).rstrip("/")
        self.api_key = (
            api_key if api_key is not None else settings.SAFETY_REMOTE_API_KEY
        )
        self.model = model or settings.SAFETY_REMOTE_MODEL
        self.timeout_s = float(timeout_s or settings.SAFETY_TIMEOUT_S)
        self.transport = transport

    def _post(self, texts: list[str]) -> list[dict[str, Any]]:
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        try:
            with httpx.Client(timeout=self.timeout_s, transport=self.transport) as http:
                response = http.post(
                    f"{self.base_url}/moderations",
                    json={"model": self.model, "input": texts},
                    headers=headers,
                )
                response.raise_for_status()
                results = response.json()["results"]
        except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
            raise ModerationUnavailable(
                f"Content moderation is unavailable right now: the moderation "
                f"endpoint failed ({exc.__class__.__name__})."
            ) from exc
        if not isinstance(results, list) or len(results) != len(texts):
            raise ModerationUnavailable(
                "Content moderation is unavailable right now: the moderation endpoint "
                "returned the wrong number of results."
            )
        return results

    def _verdict(self, result: dict[str, Any]) -> Verdict:
        scores: dict[Category, float] = {}
        other: list[str] = []
        for name, score in (result.get("category_scores") or {}).items():
            category = OPENAI_CATEGORY.get(name)
            if category is None:
                if float(score) >= REMOTE_THRESHOLD:
                    other.append(name)
                continue
            scores[category] = max(scores.get(category, 0.0), float(score))
        return Verdict.from_scores(
            scores,
            thresholds=dict.fromkeys(Category, REMOTE_THRESHOLD),
            backend=self.name,
            hazards=tuple(other),
        )

    def classify(self, text: str, *, vector: Sequence[float] | None = None) -> Verdict:
        """Judge ``text`` remotely (``vector`` is not used). Raises
        :class:`ModerationUnavailable` on a network error, a non-2xx answer or an
        unreadable body."""
        return self._verdict(self._post([text])[0])

    def classify_batch(self, texts: Sequence[str]) -> list[Verdict]:
        """Judge many texts in one request."""
        return [self._verdict(r) for r in self._post(list(texts))] if texts else []
