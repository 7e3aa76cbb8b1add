"""A turn's shared TextVector embeds its text once, on first read, and says what it
already has without embedding (``embedded``)."""

from __future__ import annotations

import numpy as np
import pytest

from inference import embeddings

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("embedding_worker")]


def test_the_text_is_embedded_once_on_first_read(monkeypatch):
    requests: list[list[str]] = []
    original = embeddings.embed_texts

    def spy(texts, **options):
        requests.append(list(texts))
        return original(texts, **options)

    monkeypatch.setattr(embeddings, "embed_texts", spy)
    query = embeddings.TextVector("When should I plant tulips?")
    assert query.embedded is None and requests == []
    first = query.get()
    assert first is not None and query.vector == first and query.embedded == first
    assert requests == [["When should I plant tulips?"]]
    alone = original(["When should I plant tulips?"]).vectors[0]
    assert np.allclose(first, alone, atol=1e-4)


def test_an_unavailable_embedding_is_remembered_not_waited_for_again(monkeypatch):
    calls = 0

    def down(texts, **options):
        nonlocal calls
        calls += 1
        raise embeddings.EmbeddingUnavailable("no worker")

    monkeypatch.setattr(embeddings, "embed_texts", down)
    query = embeddings.TextVector("hello")
    assert query.get() is None and query.get() is None
    assert calls == 1 and isinstance(query.error, embeddings.EmbeddingUnavailable)
    with pytest.raises(embeddings.EmbeddingUnavailable):
        _ = query.vector
    assert query.embedded is None
