"""Documents, chunks, long-term facts and citations (DESIGN §7, §9).

Vectors are all-MiniLM-L6-v2 embeddings: 384 dimensions, unit length, searched by
cosine distance through HNSW indexes (pgvector). Models of other apps are referenced by
string only (``conversations.Message``), so no Python import points up the layers.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone
from pgvector.django import HnswIndex, VectorField

EMBEDDING_DIM = 384


class Document(models.Model):
    """A file a user uploaded to ask about; its text is split into :class:`Chunk` rows."""

    class Status(models.TextChoices):
        PENDING = "pending"
        PROCESSING = "processing"
        READY = "ready"
        FAILED = "failed"

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="documents"
    )
    # A document uploaded inside a conversation is deleted with it (DESIGN §9).
    conversation = models.ForeignKey(
        "conversations.Conversation",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="documents",
    )
    title = models.CharField(max_length=255)
    content_type = models.CharField(max_length=16)
    status = models.CharField(
        max_length=16, choices=Status.choices, default=Status.PENDING
    )
    error = models.TextField(blank=True, default="")
    # size: bytes of the uploaded file; data: those bytes until the ingest task has
    # extracted the text (then emptied); text: the extracted text (chunk offsets index it).
    size = models.PositiveIntegerField(default=0)
    data = models.BinaryField(blank=True, default=b"", editable=False)
    text = models.TextField(blank=True, default="")
    chunk_count = models.PositiveIntegerField(default=0)
    created = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created"]
        indexes = [models.Index(fields=["user", "-created"], name="doc_user_created")]

    def __str__(self) -> str:
        return self.title


class Chunk(models.Model):
    """A passage of a document: ``text == document.text[start_char:end_char]``.

    ``user`` is the document's owner, copied here so the filtered vector search needs no
    join.
    """

    document = models.ForeignKey(
        Document, on_delete=models.CASCADE, related_name="chunks"
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+"
    )
    ord = models.PositiveIntegerField()
    text = models.TextField()
    start_char = models.PositiveIntegerField()
    end_char = models.PositiveIntegerField()
    embedding = VectorField(dimensions=EMBEDDING_DIM)
    # Screened at ingestion (MEMORY_CHUNK_SCREENER, e.g. for prompt injection): a
    # flagged chunk is kept and shown to its owner, but not retrieved into prompts
    # unless MEMORY_RETRIEVE_FLAGGED. Category and score (0..1) are the screener's.
    # database defaults too: bulk loaders (COPY in tests/bench) leave them out
    flagged = models.BooleanField(default=False, db_default=False)
    moderation_category = models.CharField(
        max_length=32, blank=True, default="", db_default=""
    )
    moderation_score = models.FloatField(null=True, blank=True)

    class Meta:
        ordering = ["document", "ord"]
        constraints = [
            models.UniqueConstraint(fields=["document", "ord"], name="chunk_doc_ord")
        ]
        indexes = [
            # the admin's "flagged chunks" list: few rows, so a partial index
            models.Index(
                fields=["document", "ord"],
                condition=models.Q(flagged=True),
                name="chunk_flagged",
            ),
            HnswIndex(
                name="chunk_embedding_hnsw",
                fields=["embedding"],
                m=16,
                ef_construction=64,
                opclasses=["vector_cosine_ops"],
            ),
        ]

    def __str__(self) -> str:
        return f"{self.document_id}#{self.ord}"

    @property
    def moderation_label(self) -> str:
        """The flagged category in words ("prompt injection"), "" when not flagged."""
        return self.moderation_category.replace("_", " ")


class MemoryFact(models.Model):
    """Something the assistant remembers about a user across conversations."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memory_facts"
    )
    text = models.CharField(max_length=500)
    embedding = VectorField(dimensions=EMBEDDING_DIM)
    source_message = models.ForeignKey(
        "conversations.Message",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    created = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created"]
        indexes = [
            models.Index(fields=["user", "-created"], name="fact_user_created"),
            HnswIndex(
                name="fact_embedding_hnsw",
                fields=["embedding"],
                m=16,
                ef_construction=64,
                opclasses=["vector_cosine_ops"],
            ),
        ]

    def __str__(self) -> str:
        return self.text


class MemorySettings(models.Model):
    """Per-user memory switch: when off, no fact is stored or put in a prompt."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+"
    )
    enabled = models.BooleanField(default=True)

    def __str__(self) -> str:
        return f"memory {'on' if self.enabled else 'off'} for {self.user_id}"


class Citation(models.Model):
    """A numbered passage an answer was given (``[n]`` in the prompt and the answer)."""

    message = models.ForeignKey(
        "conversations.Message", on_delete=models.CASCADE, related_name="citations"
    )
    chunk = models.ForeignKey(Chunk, on_delete=models.CASCADE, related_name="+")
    number = models.PositiveIntegerField()

    class Meta:
        ordering = ["message", "number"]
        constraints = [
            models.UniqueConstraint(
                fields=["message", "number"], name="citation_message_number"
            )
        ]

    def __str__(self) -> str:
        return f"[{self.number}] {self.chunk_id}"
