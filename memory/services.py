"""Writes of memory: documents (upload, ingest, delete) and long-term facts.

Ingest (DESIGN §9): the upload stores the file's bytes (status ``pending``; only its
name and size are checked) and, on commit, queues :func:`memory.tasks.ingest_document`;
ingesting extracts the text within the caps of :mod:`memory.extract` (a file over one
is ``failed`` with a message naming the cap, its bytes dropped and nothing else kept),
chunks it (token sized, overlapping, no character dropped), embeds the chunks and
stores them with the status ``ready`` in one transaction, so a failure leaves no chunk
behind (status ``failed`` with the reason). Ingesting again is idempotent (chunks are
replaced).

Vectors come from the inference tier's embedding pool (:mod:`inference.embeddings`),
in batches of EMBEDDING_INGEST_BATCH chunks. When it is unavailable the document goes
back to ``pending`` with the reason and the Celery task retries later; a fact cannot be
stored without its vector, so adding one raises ServiceUnavailable (503).

Screening (prompt injection in retrieved text, docs/safety.md): before they are stored, the
chunks are screened by the hook named in MEMORY_CHUNK_SCREENER (dotted path, loaded
with ``import_string`` like GATEWAY_STREAM_POLICIES; default
``safety.documents.chunks_screen``), which reads the vectors just computed for
retrieval, so screening embeds nothing. memory and safety are sibling layers and may
not import each other: the setting names the hook, and this module only knows its
contract (:data:`ChunkScreener`). A flagged chunk is stored with ``flagged`` set and
is left out of retrieval (:func:`memory.selectors.chunks_search`).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction
from django.utils.module_loading import import_string

from chatsite.errors import DomainError, InvalidInput, NotFound, ServiceUnavailable
from chatsite.uploads import upload_file_name
from inference.embeddings import EmbeddingUnavailable, embed_text, embed_texts
from memory import selectors
from memory.chunking import text_chunk
from memory.extract import ExtractLimits, text_extract, upload_check
from memory.models import Chunk, Document, MemoryFact, MemorySettings

logger = logging.getLogger(__name__)

# Progress callback: (chunks embedded so far, total chunks).
Progress = Callable[[int, int], None]

# The screening hook's contract: called with ``texts`` (the chunks' texts) and
# ``vectors`` (their 384-d embeddings, same order) as keyword arguments; returns one
# entry per chunk: None (nothing found) or ``(category, score)`` (a category code such
# as "prompt_injection", score 0..1). It may raise ServiceUnavailable when it cannot
# judge and the deployment fails closed: the document then waits and is retried.
ChunkScreener = Callable[..., list[tuple[str, float] | None]]


def chunk_screener() -> ChunkScreener | None:
    """Return the hook named by MEMORY_CHUNK_SCREENER, or None when it is empty.

    Raises ImportError for a path that names nothing (a deployment error, loud).
    """
    path = getattr(settings, "MEMORY_CHUNK_SCREENER", "")
    return import_string(path) if path else None


def _chunks_screen(
    texts: list[str], vectors: list[Any]
) -> list[tuple[str, float] | None]:
    """Screen the chunks with the configured hook (one entry per chunk)."""
    screener = chunk_screener()
    if screener is None or not texts:
        return [None] * len(texts)
    flags = list(screener(texts=texts, vectors=vectors))
    if len(flags) != len(texts):
        raise ValueError(
            f"chunk screener returned {len(flags)} verdicts for {len(texts)} chunks"
        )
    return flags


# The fact screening hook's contract (MEMORY_FACT_SCREENER): called with ``user_id``,
# ``text`` and ``typed`` (the user wrote it by hand) as keyword arguments; returns None
# (may be stored) or a category code (not stored). For a typed fact it may raise a
# DomainError itself (the content policy's 400), which reaches the user as is; it may
# raise ServiceUnavailable when it cannot judge and the deployment fails closed.
FactScreener = Callable[..., str | None]


def fact_screener() -> FactScreener | None:
    """Return the hook named by MEMORY_FACT_SCREENER, or None when it is empty."""
    path = getattr(settings, "MEMORY_FACT_SCREENER", "")
    return import_string(path) if path else None


def _fact_screen(*, user_id: int, text: str, typed: bool) -> str | None:
    screener = fact_screener()
    if screener is None:
        return None
    return screener(user_id=user_id, text=text, typed=typed)


def document_upload(
    *,
    user: User,
    name: str,
    data: bytes,
    conversation_id: Any = None,
    ingest_on_commit: bool = True,
) -> Document:
    """Store an uploaded file as a ``pending`` document; ingest it after commit.

    ``data`` is the file's bytes (limit MEMORY_UPLOAD_MAX_BYTES). Only the name and
    the size are checked here; the title is the name without its leading directories
    (:func:`chatsite.uploads.upload_file_name`). The text is extracted by the ingest
    task. Raises
    InvalidInput (unsupported type, empty) or PayloadTooLarge; nothing is stored when
    it raises.
    """
    kind = upload_check(
        name=name, size=len(data), max_bytes=settings.MEMORY_UPLOAD_MAX_BYTES
    )
    title = (upload_file_name(name) or "document")[:255]
    with transaction.atomic():
        document = Document.objects.create(
            user=user,
            conversation_id=conversation_id,
            title=title,
            content_type=kind,
            size=len(data),
            data=data,
        )
        if ingest_on_commit:
            from memory.tasks import ingest_document

            transaction.on_commit(lambda: ingest_document.delay(document.id))
    return document


def document_ingest(*, document_id: int, progress: Progress | None = None) -> Document:
    """Chunk, embed and store a document's chunks; return it ``ready`` or ``failed``.

    A document still holding its file's bytes has its text extracted first
    (:func:`memory.extract.text_extract`, caps from settings); a file that cannot be
    read or is over a cap leaves the document ``failed`` with the message, no bytes,
    no text and no chunk. Idempotent: existing chunks are replaced. Sizes come from
    MEMORY_CHUNK_TOKENS and
    MEMORY_CHUNK_OVERLAP_TOKENS (tokens of the embedding model). ``progress`` is called
    with (chunks embedded, total chunks) after each batch. Raises NotFound if the document
    is gone (deleted meanwhile), EmbeddingUnavailable when no vector can be had and
    ServiceUnavailable when the screener cannot judge and fails closed (either way the
    document is left ``pending`` with the reason, to be retried). Each chunk is
    screened (:func:`chunk_screener`) and stored flagged or not.
    """
    updated = Document.objects.filter(id=document_id).update(
        status=Document.Status.PROCESSING, error=""
    )
    if not updated:
        raise NotFound("This document does not exist.")
    document = Document.objects.get(id=document_id)
    if document.data:
        try:
            document.text = _document_text_extract(document)
        except DomainError as exc:
            Document.objects.filter(id=document_id).update(
                status=Document.Status.FAILED, error=exc.message, data=b"", text=""
            )
            document.refresh_from_db()
            return document
    try:
        pieces = text_chunk(
            document.text,
            max_tokens=settings.MEMORY_CHUNK_TOKENS,
            overlap_tokens=settings.MEMORY_CHUNK_OVERLAP_TOKENS,
        )
        batch = settings.EMBEDDING_INGEST_BATCH
        vectors: list[Any] = []
        for i in range(0, len(pieces), batch):
            vectors.extend(
                embed_texts(
                    [p.text for p in pieces[i : i + batch]],
                    timeout_s=settings.EMBEDDING_INGEST_TIMEOUT_S,
                    user_ref=str(document.user_id),
                    bulk=True,  # behind every question, never in front of one
                ).vectors
            )
            if progress:
                progress(min(i + batch, len(pieces)), len(pieces))
        flags = _chunks_screen([p.text for p in pieces], vectors)
        with transaction.atomic():
            if not Document.objects.select_for_update().filter(id=document_id).exists():
                raise NotFound("This document does not exist.")
            Chunk.objects.filter(document_id=document_id).delete()
            Chunk.objects.bulk_create(
                [
                    Chunk(
                        document_id=document_id,
                        user_id=document.user_id,
                        ord=p.ord,
                        text=p.text,
                        start_char=p.start,
                        end_char=p.end,
                        embedding=v,
                        flagged=flag is not None,
                        moderation_category=flag[0] if flag else "",
                        moderation_score=flag[1] if flag else None,
                    )
                    for p, v, flag in zip(pieces, vectors, flags, strict=True)
                ],
                batch_size=500,
            )
            Document.objects.filter(id=document_id).update(
                status=Document.Status.READY, chunk_count=len(pieces), error=""
            )
    except NotFound:
        raise
    except ServiceUnavailable as exc:  # the screener, failing closed: wait and retry
        Document.objects.filter(id=document_id).update(
            status=Document.Status.PENDING,
            error=f"Waiting to be checked: {exc.message} The document will be "
            "processed as soon as the service is back.",
        )
        raise
    except EmbeddingUnavailable:
        Document.objects.filter(id=document_id).update(
            status=Document.Status.PENDING,
            error="Waiting for the embedding service, which is not answering; "
            "the document will be processed as soon as it is back.",
        )
        raise
    except Exception as exc:  # noqa: BLE001 - recorded on the document for the user
        logger.exception("ingest of document %s failed", document_id)
        Document.objects.filter(id=document_id).update(
            status=Document.Status.FAILED,
            error=f"Processing failed: {exc}"[:1000],
        )
    document.refresh_from_db()
    return document


def _document_text_extract(document: Document) -> str:
    """Extract a document's text from its stored bytes and keep the text in place of
    the bytes; return it. Raises InvalidInput or PayloadTooLarge."""
    text = text_extract(
        name=document.title,
        kind=document.content_type,
        data=bytes(document.data),
        limits=ExtractLimits.from_settings(),
    )
    Document.objects.filter(id=document.id).update(text=text, data=b"")
    return text


def document_delete(*, user: User, document_id: Any) -> None:
    """Delete the user's document with its chunks and vectors. Raises NotFound."""
    document = selectors.document_get(user=user, document_id=document_id)
    document.delete()


# --- Long-term facts -----------------------------------------------------------------

# Linear: no lazy group before an optional tail (``(.+?)\s*$`` backtracks over every
# run of spaces: quadratic in the message's length).
_REMEMBER_RE = re.compile(
    r"^\s*(?:please\s+)?remember\s+(?:that\s+)?(?P<fact>.+)",
    re.IGNORECASE | re.DOTALL,
)


def remember_request_parse(text: str) -> str | None:
    """Return the fact of a "remember that …" message, or None if it is not one
    (nor is any message over MEMORY_REMEMBER_MAX_CHARS characters)."""
    if not text or len(text) > settings.MEMORY_REMEMBER_MAX_CHARS:
        return None
    match = _REMEMBER_RE.match(text)
    if not match:
        return None
    fact = " ".join(match.group("fact").split()).rstrip(".!")
    return fact or None


def _fact_clean(text: Any) -> str:
    if not isinstance(text, str) or not text.strip():
        raise InvalidInput("A memory cannot be empty.", code="empty_fact")
    text = " ".join(text.split())
    if len(text) > 500:
        raise InvalidInput(
            "A memory can be at most 500 characters long.", code="fact_too_long"
        )
    return text


def _fact_vector(text: str) -> list[float]:
    """Embed a fact's text; raise ServiceUnavailable (503) when no vector can be had."""
    try:
        return embed_text(text)
    except EmbeddingUnavailable as exc:
        raise ServiceUnavailable(
            "Memory cannot be saved right now: the embedding service is unavailable. "
            "Please try again in a minute.",
            code=exc.code,
            retryable=True,
            retry_after_s=30,
        ) from exc


def fact_add(
    *, user: User | int, text: Any, source_message_id: Any = None, typed: bool = False
) -> MemoryFact | None:
    """Remember a fact about the user; return it, or None when memory is off or the
    fact is screened out.

    Screened first (MEMORY_FACT_SCREENER): ``typed`` (the user wrote it on the memory
    page) is moderated as a typed message (the hook raises the content policy's 400);
    otherwise (extracted, "remember that") a fact that would be blocked is not stored.
    A fact within MEMORY_FACT_DUPLICATE_DISTANCE (cosine) of an existing one of the same
    user is merged into it (the newer wording wins). Raises InvalidInput (empty, over
    500 characters), ModerationBlocked (typed, against the content policy),
    ServiceUnavailable (no embedding worker, or moderation down failing closed).
    """
    user_id = selectors.user_id_of(user)
    text = _fact_clean(text)
    if not selectors.memory_enabled(user=user_id):
        return None
    if _fact_screen(user_id=user_id, text=text, typed=typed) is not None:
        return None
    vector = _fact_vector(text)
    near = selectors.facts_search(
        user=user_id,
        vector=vector,
        k=1,
        max_distance=settings.MEMORY_FACT_DUPLICATE_DISTANCE,
    )
    if near:
        fact = near[0][0]
        MemoryFact.objects.filter(id=fact.id).update(text=text, embedding=vector)
        fact.refresh_from_db()
        return fact
    return MemoryFact.objects.create(
        user_id=user_id,
        text=text,
        embedding=vector,
        source_message_id=source_message_id,
    )


def fact_update(*, user: User, fact_id: Any, text: Any) -> MemoryFact:
    """Edit one of the user's facts (re-embedded; screened as a typed fact). Raises
    NotFound, InvalidInput, ModerationBlocked (against the content policy),
    ServiceUnavailable (no embedding worker; the fact is left as it was)."""
    fact = selectors.fact_get(user=user, fact_id=fact_id)
    cleaned = _fact_clean(text)
    _fact_screen(user_id=user.pk, text=cleaned, typed=True)
    fact.text = cleaned
    fact.embedding = _fact_vector(fact.text)
    fact.save(update_fields=["text", "embedding"])
    return fact


def fact_delete(*, user: User, fact_id: Any) -> None:
    """Forget one of the user's facts. Raises NotFound."""
    selectors.fact_get(user=user, fact_id=fact_id).delete()


def memory_enabled_set(*, user: User, enabled: bool) -> None:
    """Switch the user's long-term memory on or off (off: facts are neither stored nor
    used; the stored ones are kept until deleted)."""
    MemorySettings.objects.update_or_create(user=user, defaults={"enabled": enabled})


def citations_store(*, message_id: Any, chunk_ids: list[int]) -> None:
    """Record the passages an answer was given, numbered 1..n in prompt order."""
    from memory.models import Citation

    Citation.objects.bulk_create(
        [
            Citation(message_id=message_id, chunk_id=chunk_id, number=n)
            for n, chunk_id in enumerate(chunk_ids, 1)
        ]
    )
