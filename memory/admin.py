"""Admin views of documents, their chunks and remembered facts (read-mostly, for support).

Chunks flagged at ingestion (memory/services.py, screening) are listed under "Chunks"
with the ``flagged`` filter, their text shown escaped (Django admin escapes every
value it renders that is not marked safe) and the document one click away; the
Documents list shows how many passages of each were flagged.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.contrib import admin
from django.db.models import Count, Q, QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html
from django.utils.text import Truncator

from memory.models import Chunk, Document, MemoryFact

if TYPE_CHECKING:
    from memory.selectors import DocumentWithFlags


@admin.register(Document)
class DocumentAdmin(admin.ModelAdmin):
    list_display = (
        "title",
        "user",
        "status",
        "chunk_count",
        "flagged_passages",
        "size",
        "created",
    )
    list_filter = ("status", "content_type")
    search_fields = ("title", "user__username")
    exclude = ("text", "data")

    def get_queryset(self, request: HttpRequest) -> QuerySet[Document]:
        return (
            super()
            .get_queryset(request)
            .defer("text", "data")
            .annotate(flagged_chunks=Count("chunks", filter=Q(chunks__flagged=True)))
        )

    @admin.display(description="flagged passages", ordering="flagged_chunks")
    def flagged_passages(self, obj: DocumentWithFlags) -> str:
        """The number of flagged chunks, linked to them in the chunk list."""
        if not obj.flagged_chunks:
            return "0"
        url = reverse("admin:memory_chunk_changelist")
        return format_html(
            '<a href="{}?document__id__exact={}&amp;flagged__exact=1">{}</a>',
            url,
            obj.pk,
            obj.flagged_chunks,
        )


@admin.register(Chunk)
class ChunkAdmin(admin.ModelAdmin):
    """Document passages; filter ``flagged`` for the ones screening kept out of prompts."""

    list_display = (
        "__str__",
        "document_link",
        "ord",
        "flagged",
        "moderation_category",
        "moderation_score",
        "excerpt",
    )
    list_filter = ("flagged", "moderation_category")
    search_fields = ("text", "document__title", "user__username")
    list_select_related = ("document",)
    exclude = ("embedding",)
    readonly_fields = (
        "document",
        "user",
        "ord",
        "text",
        "start_char",
        "end_char",
        "flagged",
        "moderation_category",
        "moderation_score",
    )

    def get_queryset(self, request: HttpRequest) -> QuerySet[Chunk]:
        return super().get_queryset(request).defer("embedding", "document__text")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    @admin.display(description="document", ordering="document__title")
    def document_link(self, obj: Chunk) -> str:
        """The chunk's document, linked to its admin page (title escaped)."""
        url = reverse("admin:memory_document_change", args=[obj.document_id])
        return format_html('<a href="{}">{}</a>', url, obj.document.title)

    @admin.display(description="text")
    def excerpt(self, obj: Chunk) -> str:
        """The first 120 characters (plain text: the admin escapes it)."""
        return Truncator(obj.text).chars(120)


@admin.register(MemoryFact)
class MemoryFactAdmin(admin.ModelAdmin):
    list_display = ("text", "user", "created")
    search_fields = ("text", "user__username")
    exclude = ("embedding",)
