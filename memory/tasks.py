"""Celery tasks of memory (thin: each calls one service; safe to retry)."""

from typing import Any

from celery import shared_task
from django.conf import settings

from chatsite.errors import InvalidInput, NotFound
from memory import services


@shared_task(name="memory.tasks.ingest_document")
def ingest_document(document_id: int) -> str:
    """Chunk, embed and store an uploaded document; return its final status."""
    try:
        return services.document_ingest(document_id=document_id).status
    except NotFound:
        return "deleted"


@shared_task(name="memory.tasks.remember_fact")
def remember_fact(user_id: int, text: str, source_message_id: Any = None) -> bool:
    """Store a fact the user asked to be remembered; False if memory is off or empty."""
    try:
        fact = services.fact_add(
            user=user_id, text=text, source_message_id=source_message_id
        )
    except InvalidInput:
        return False
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
        services.facts_extract(
            user_id=user_id,
            messages=messages,
            source_message_id=source_message_id,
            pool=pool or settings.INFERENCE_DEFAULT_POOL,
            timeout_s=settings.MEMORY_GENERATION_TIMEOUT_S,
        )
    )
