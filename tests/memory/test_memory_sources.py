"""memory.selectors.memory_sources: what a turn searches, read in one query."""

from __future__ import annotations

import pytest

from memory import selectors
from memory.models import Chunk, Document, MemoryFact, MemorySettings

pytestmark = pytest.mark.django_db


def _vector() -> list[float]:
    return [1.0] + [0.0] * 383


def test_facts_need_memory_on_and_documents_need_a_chunk(
    user, other_user, django_assert_num_queries
):
    with django_assert_num_queries(1):
        assert selectors.memory_sources(user=user) == (False, False)
    MemoryFact.objects.create(user=user, text="I keep bees.", embedding=_vector())
    document = Document.objects.create(
        user=other_user, title="notes", content_type="md", status="ready"
    )
    Chunk.objects.create(
        document=document,
        user=other_user,
        ord=0,
        text="bees",
        start_char=0,
        end_char=4,
        embedding=_vector(),
    )
    with django_assert_num_queries(1):
        assert selectors.memory_sources(user=user) == (True, False)
    assert selectors.memory_sources(user=other_user.pk) == (False, True)
    MemorySettings.objects.create(user=user, enabled=False)
    assert selectors.memory_sources(user=user) == (False, False)
