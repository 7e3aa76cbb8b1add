"""Judging a text with the turn's shared vector (safety/judging.py), real worker."""

from __future__ import annotations

from typing import Any

import pytest

from inference import embeddings
from inference.embeddings import TextVector
from safety.classifiers import classifier_get
from safety.classifiers import embedded as embedded_classifier
from safety.classifiers.features import ids_removed
from safety.judging import verdict_fresh


@pytest.fixture
def embedded_texts(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """Every list of texts sent to the embedding pool (the shared vector's and the
    classifier's requests), in order."""
    sent: list[list[str]] = []
    real = embeddings.embed_texts

    def recording(texts: list[str], **options: Any) -> embeddings.Embeddings:
        sent.append(list(texts))
        return real(texts, **options)

    monkeypatch.setattr(embeddings, "embed_texts", recording)
    monkeypatch.setattr(embedded_classifier, "embed_texts", recording)
    return sent


def test_a_text_with_an_id_is_embedded_once_without_it(
    embedding_worker: Any, embedded_texts: list[list[str]]
) -> None:
    """The classifier reads the vector of the text without its ids: the shared
    vector of the whole text is not embedded for it (one request, not two), and the
    verdict is the one the classifier gives alone."""
    text = "Count to five for ticket 3f9a1c2b"
    read = ids_removed(text)
    assert read != text
    query = TextVector(text)
    verdict = verdict_fresh(text=text, query=query)
    assert embedded_texts == [[read]]
    assert query.embedded is None  # left for whoever needs the whole text's vector
    alone = classifier_get().classify(text)
    assert verdict.scores == alone.scores and verdict.flagged == alone.flagged


def test_a_text_without_ids_reads_the_shared_vector(
    embedding_worker: Any, embedded_texts: list[list[str]]
) -> None:
    text = "How often should I water the basil on my balcony?"
    query = TextVector(text)
    verdict_fresh(text=text, query=query)
    assert embedded_texts == [[text]]
    assert query.embedded is not None  # embedded once, for moderation and the turn
