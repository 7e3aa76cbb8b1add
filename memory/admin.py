"""Admin views of documents and remembered facts (read-mostly, for support)."""

from django.contrib import admin

from memory.models import Document, MemoryFact


@admin.register(Document)
class DocumentAdmin(admin.ModelAdmin):
    list_display = ("title", "user", "status", "chunk_count", "size", "created")
    list_filter = ("status", "content_type")
    search_fields = ("title", "user__username")
    exclude = ("text",)


@admin.register(MemoryFact)
class MemoryFactAdmin(admin.ModelAdmin):
    list_display = ("text", "user", "created")
    search_fields = ("text", "user__username")
    exclude = ("embedding",)
