"""Filtered vector search over chunks (memory/selectors.py): k rows per user."""

import pytest
from django.db import connection

from memory import selectors
from memory.models import Chunk, Document
from tests.conftest import make_user
from tests.memory.factories import chunks_bulk_load, random_unit_vectors

pytestmark = pytest.mark.django_db


def document_for(user, title):
    return Document.objects.create(
        user=user, title=title, content_type="txt", status=Document.Status.READY
    )


@pytest.fixture
def crowded(user):
    """10,000 chunks of five other users and 20 of ``user``, HNSW index built."""
    vectors = random_unit_vectors(10_020, seed=1)
    for i in range(5):
        other = make_user(f"other{i}")
        chunks_bulk_load(
            document=document_for(other, f"o{i}"),
            vectors=vectors[i * 2000 : (i + 1) * 2000],
            build_index=False,
        )
    chunks_bulk_load(document=document_for(user, "mine"), vectors=vectors[10_000:])
    assert Chunk.objects.count() == 10_020
    return random_unit_vectors(1, seed=3)[0].tolist()


def search_through_hnsw(user, query, *, iterative: bool):
    """Run chunks_search with the planner pushed onto the HNSW index scan."""
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_sort = off")  # no btree + sort plan
        cursor.execute("SET LOCAL enable_seqscan = off")
    if not iterative:
        from memory import selectors as s

        original = s._iterative_scan

        def plain(ef_search):
            original(ef_search)
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL hnsw.iterative_scan = off")

        s._iterative_scan = plain
        try:
            return selectors.chunks_search(user=user, vector=query, k=5)
        finally:
            s._iterative_scan = original
    return selectors.chunks_search(user=user, vector=query, k=5)


def test_user_filtered_search_returns_k_of_yours_among_10000_of_others(user, crowded):
    hits = selectors.chunks_search(user=user, vector=crowded, k=5)
    assert len(hits) == 5
    assert all(h.chunk.user_id == user.id for h in hits)
    assert [h.distance for h in hits] == sorted(h.distance for h in hits)


def test_the_hnsw_path_needs_the_iterative_scan_to_fill_k(user, crowded):
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_sort = off")
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute(
            "EXPLAIN SELECT id FROM memory_chunk WHERE user_id = %s "
            "ORDER BY embedding <=> %s::vector LIMIT 5",
            [user.id, str(crowded)],
        )
        plan = "\n".join(r[0] for r in cursor.fetchall())
    assert "chunk_embedding_hnsw" in plan
    hits = search_through_hnsw(user, crowded, iterative=True)
    assert len(hits) == 5 and all(h.chunk.user_id == user.id for h in hits)
    # Without it, ef_search=40 candidates hold ~0 of the 20 rows: fewer than k come back.
    assert len(search_through_hnsw(user, crowded, iterative=False)) < 5


def test_a_user_never_gets_another_users_chunks(user, other_user):
    chunks_bulk_load(
        document=document_for(other_user, "theirs"),
        vectors=random_unit_vectors(50, seed=4),
    )
    query = random_unit_vectors(1, seed=5)[0].tolist()
    assert selectors.chunks_search(user=user, vector=query, k=5) == []
    assert len(selectors.chunks_search(user=other_user, vector=query, k=5)) == 5
