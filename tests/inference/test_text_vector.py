"""A turn's shared TextVector embeds the texts registered with ``also`` (the window of
the last user turns input moderation judges) in the same request as its own."""

from __future__ import annotations

import numpy as np
import pytest

from inference import embeddings

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("embedding_worker")]


def test_companion_texts_are_embedded_in_the_same_request(monkeypatch):
    requests: list[list[str]] = []
    original = embeddings.embed_texts

    def spy(texts, **options):
        requests.append(list(texts))
        return original(texts, **options)

    monkeypatch.setattr(embeddings, "embed_texts", spy)
    query = embeddings.TextVector("How deep?")
    query.also("When should I plant tulips?\nHow deep?")
    assert query.vector_of("When should I plant tulips?\nHow deep?") is None
    query.get()
    assert requests == [["How deep?", "When should I plant tulips?\nHow deep?"]]
    alone = original(["When should I plant tulips?\nHow deep?"]).vectors[0]
    together = query.vector_of("When should I plant tulips?\nHow deep?")
    assert together is not None
    assert np.allclose(together, alone, atol=1e-4)
    query.also("too late")  # after the request: not embedded, never waited for
    assert query.vector_of("too late") is None and len(requests) == 1
