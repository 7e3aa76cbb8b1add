"""Celery tasks of memory (thin: each calls one service; safe to retry)."""

from celery import shared_task

from chatsite.errors import NotFound
from memory import services


@shared_task(name="memory.tasks.ingest_document")
def ingest_document(document_id: int) -> str:
    """Chunk, embed and store an uploaded document; return its final status."""
    try:
        return services.document_ingest(document_id=document_id).status
    except NotFound:
        return "deleted"
