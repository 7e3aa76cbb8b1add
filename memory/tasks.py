"""Celery tasks of memory (thin: each calls one service; safe to retry)."""

from typing import Any

from celery import shared_task
from django.conf import settings

from chatsite.errors import InvalidInput, NotFound, ServiceUnavailable
from inference.embeddings import EmbeddingUnavailable
from memory import services
from memory.models import Document
from memory.summary import facts_extract

# Ingestion waits for the embedding pool: retried with backoff (10 s doubling, capped
# at 5 min) this many times (about an hour in all) before the document is failed.
INGEST_RETRIES = 15


@shared_task(name="memory.tasks.ingest_document", bind=True, max_retries=INGEST_RETRIES)
def ingest_document(self: Any, document_id: int) -> str:
    """Read (within the caps of memory.extract), chunk, embed and store an uploaded
    document; return its final status.

    Without an embedding worker the document stays ``pending`` and the task is retried
    later; after INGEST_RETRIES tries it is ``failed`` with the reason.
    """
    try:
        return services.document_ingest(document_id=document_id).status
    except NotFound:
        return "deleted"
    except (EmbeddingUnavailable, ServiceUnavailable) as exc:
        # no embedding worker, or a chunk screener that cannot judge (failing closed)
        if self.request.retries >= INGEST_RETRIES or self.request.is_eager:
            Document.objects.filter(id=document_id).update(
                status=Document.Status.FAILED,
                error=f"Processing failed: {exc}"[:1000],
            )
            return Document.Status.FAILED
        raise self.retry(
            exc=exc, countdown=min(300, 10 * 2**self.request.retries)
        ) from exc


@shared_task(name="memory.tasks.remember_fact")
def remember_fact(user_id: int, text: str, source_message_id: Any = None) -> bool:
    """Store a fact the user asked to be remembered; False if memory is off or empty."""
    try:
        fact = services.fact_add(
            user=user_id, text=text, source_message_id=source_message_id
        )
    except InvalidInput:
        return False
    except ServiceUnavailable as exc:  # no embedding worker: try again in a while
        raise remember_fact.retry(exc=exc, countdown=60, max_retries=10) from exc
    return fact is not None


@shared_task(name="memory.tasks.extract_facts")
def extract_facts(
    user_id: int,
    messages: list[dict[str, str]],
    source_message_id: Any = None,
    pool: str | None = None,
) -> int:
    """Let the model propose facts about the user from an exchange; return how many."""
    return len(
        facts_extract(
            user_id=user_id,
            messages=messages,
            source_message_id=source_message_id,
            pool=pool or settings.INFERENCE_DEFAULT_POOL,
            timeout_s=settings.MEMORY_GENERATION_TIMEOUT_S,
        )
    )
