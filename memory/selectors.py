"""Reads of memory: documents, vector searches over chunks and facts (always per user).

Vector searches use the HNSW cosine indexes with pgvector's iterative scan (>= 0.8):
``SET LOCAL hnsw.iterative_scan = relaxed_order`` inside a transaction makes the index
scan continue until ``k`` rows pass the owner filter, so a user whose rows are a tiny
fraction of the table still gets ``k`` results. Distances are cosine distances
(``1 - cosine similarity``, 0 = same direction, 2 = opposite).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.db import connection, transaction
from django.db.models import Count, Exists, Q, QuerySet
from pgvector.django import CosineDistance

from chatsite.errors import NotFound
from memory.models import Chunk, Document, MemoryFact, MemorySettings

if TYPE_CHECKING:
    from typing import TypedDict

    from django_stubs_ext import WithAnnotations

    class FlaggedCount(TypedDict):
        flagged_chunks: int  # passages that screening flagged

    # A document read with its ``flagged_chunks`` count (:func:`document_list`).
    DocumentWithFlags = WithAnnotations[Document, FlaggedCount]


def user_id_of(user: User | int) -> int:
    """Return the id of ``user``, given as a user or as its id."""
    return user if isinstance(user, int) else user.pk


def document_list(*, user: User) -> QuerySet[DocumentWithFlags]:
    """Return the user's documents, newest first (text and file bytes deferred), each
    annotated with ``flagged_chunks``: how many of its passages screening flagged (not
    retrieved)."""
    return (
        Document.objects.filter(user=user)
        .defer("text", "data")
        .annotate(flagged_chunks=Count("chunks", filter=Q(chunks__flagged=True)))
        .order_by("-created")
    )


def document_get(*, user: User, document_id: Any) -> Document:
    """Return the user's document; raises NotFound for unknown or others' ids."""
    try:
        return Document.objects.defer("data").get(id=int(document_id), user=user)
    except (Document.DoesNotExist, ValueError, TypeError) as exc:
        raise NotFound("This document does not exist.") from exc


def documents_owned(*, user: User | int, ids: list[int]) -> list[int]:
    """Return which of ``ids`` are the user's documents (others' and unknown ids are
    left out), in ascending order."""
    user_id = user_id_of(user)
    return sorted(
        Document.objects.filter(user_id=user_id, id__in=ids).values_list(
            "id", flat=True
        )
    )


def document_choices(*, user: User) -> QuerySet[Document]:
    """Return the user's ready documents (id and title only), by title: what a chat's
    document scope can choose from."""
    return (
        Document.objects.filter(user=user, status=Document.Status.READY)
        .only("id", "title")
        .order_by("title", "id")
    )


@dataclass
class ChunkHit:
    """A retrieved chunk and its cosine distance to the query."""

    chunk: Chunk
    distance: float


def _iterative_scan(ef_search: int) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")
        cursor.execute(f"SET LOCAL hnsw.ef_search = {int(ef_search)}")


def chunks_search(
    *,
    user: User | int,
    vector: list[float],
    k: int,
    max_distance: float | None = None,
    ef_search: int = 40,
    include_flagged: bool | None = None,
    document_ids: Collection[int] | None = None,
) -> list[ChunkHit]:
    """Return up to ``k`` of the user's chunks nearest to ``vector`` (384-d), nearest first.

    Only the user's own (ready) documents are searched. ``max_distance`` drops hits whose
    cosine distance is larger. ``ef_search`` is HNSW's candidate list size. Chunks
    flagged at ingestion (e.g. an injected instruction) are left out unless
    ``include_flagged`` (default: MEMORY_RETRIEVE_FLAGGED, off). ``document_ids``
    limits the search to those documents (a conversation's document scope); None
    searches all of the user's documents, an empty collection none (returns []).
    """
    user_id = user_id_of(user)
    if include_flagged is None:
        include_flagged = settings.MEMORY_RETRIEVE_FLAGGED
    if document_ids is not None and not document_ids:
        return []
    chunks = Chunk.objects.filter(user_id=user_id)
    if document_ids is not None:
        chunks = chunks.filter(document_id__in=list(document_ids))
    if not include_flagged:
        chunks = chunks.filter(flagged=False)
    with transaction.atomic():
        _iterative_scan(ef_search)
        rows = list(
            chunks.select_related("document")
            .defer("document__text", "embedding")
            .annotate(distance=CosineDistance("embedding", vector))
            .order_by("distance")[:k]
        )
        # Read-only: roll back so the SET LOCALs end here even inside an outer
        # transaction (a released savepoint would keep them to its end).
        transaction.set_rollback(True)
    hits = sorted(
        (ChunkHit(c, float(c.distance)) for c in rows), key=lambda h: h.distance
    )
    if max_distance is not None:
        hits = [h for h in hits if h.distance <= max_distance]
    return hits


def user_has_documents(*, user: User | int) -> bool:
    """True if the user has at least one chunk to search."""
    return Chunk.objects.filter(user_id=user_id_of(user)).exists()


def memory_sources(*, user: User | int) -> tuple[bool, bool]:
    """Return ``(facts, documents)``: whether a turn should search the user's facts
    (memory on and at least one fact) and their documents (at least one chunk).

    One query (three EXISTS subqueries on the user's row), not three round trips
    (:func:`memory_enabled`, a fact, :func:`user_has_documents`): every turn asks.
    """
    user_id = user_id_of(user)
    row = (
        get_user_model()
        .objects.filter(pk=user_id)
        .annotate(
            memory_off=Exists(
                MemorySettings.objects.filter(user_id=user_id, enabled=False)
            ),
            has_facts=Exists(MemoryFact.objects.filter(user_id=user_id)),
            has_chunks=Exists(Chunk.objects.filter(user_id=user_id)),
        )
        .values_list("memory_off", "has_facts", "has_chunks")
        .first()
    )
    if row is None:
        return False, False
    memory_off, has_facts, has_chunks = row
    return has_facts and not memory_off, has_chunks


def memory_enabled(*, user: User | int) -> bool:
    """Whether long-term memory is on for the user (on unless they switched it off)."""
    row = MemorySettings.objects.filter(user_id=user_id_of(user)).first()
    return row.enabled if row else True


def fact_list(*, user: User) -> QuerySet[MemoryFact]:
    """Return the user's remembered facts, newest first."""
    return MemoryFact.objects.filter(user=user).defer("embedding").order_by("-created")


def fact_get(*, user: User, fact_id: Any) -> MemoryFact:
    """Return one of the user's facts; raises NotFound otherwise."""
    try:
        return MemoryFact.objects.get(id=int(fact_id), user=user)
    except (MemoryFact.DoesNotExist, ValueError, TypeError) as exc:
        raise NotFound("This memory does not exist.") from exc


def facts_search(
    *,
    user: User | int,
    vector: list[float],
    k: int,
    max_distance: float | None = None,
) -> list[tuple[MemoryFact, float]]:
    """Return up to ``k`` of the user's facts nearest to ``vector`` with their distances.

    Only this user's facts are ever searched. ``max_distance`` (cosine) drops far ones.
    """
    user_id = user_id_of(user)
    with transaction.atomic():
        _iterative_scan(40)
        rows = list(
            MemoryFact.objects.filter(user_id=user_id)
            .defer("embedding")
            .annotate(distance=CosineDistance("embedding", vector))
            .order_by("distance")[:k]
        )
        transaction.set_rollback(True)  # read-only: end the SET LOCALs here
    hits: list[tuple[MemoryFact, float]] = sorted(
        ((f, float(f.distance)) for f in rows), key=lambda h: h[1]
    )
    if max_distance is not None:
        hits = [h for h in hits if h[1] <= max_distance]
    return hits
