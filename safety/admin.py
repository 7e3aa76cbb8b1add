"""Admin: the per-category moderation policies (editable) and the moderation events
(read-only list for review; the offending text is shown escaped, never as HTML)."""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest
from django.utils.text import Truncator

from safety.models import CategoryPolicy, ModerationEvent

TEXT_PREVIEW_CHARS = 120


@admin.register(CategoryPolicy)
class CategoryPolicyAdmin(admin.ModelAdmin):
    list_display = ("category", "action", "threshold", "description", "updated_at")
    list_editable = ("action", "threshold")
    readonly_fields = ("description", "updated_at")
    fields = ("category", "description", "action", "threshold", "updated_at")

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        # A category without a row falls back to its shipped policy: set the action
        # to "off" to ignore a category, never delete it.
        return False


@admin.register(ModerationEvent)
class ModerationEventAdmin(admin.ModelAdmin):
    list_display = (
        "created_at",
        "user",
        "surface",
        "direction",
        "category",
        "score_display",
        "action",
        "status",
        "text_preview",
        "backend",
    )
    list_filter = (
        "category",
        "surface",
        "direction",
        "status",
        "action",
        ("created_at", admin.DateFieldListFilter),
    )
    list_select_related = ("user",)
    search_fields = ("user__username", "text")
    date_hierarchy = "created_at"
    readonly_fields = (
        "created_at",
        "user",
        "surface",
        "direction",
        "category",
        "score",
        "scores",
        "action",
        "status",
        "text",
        "conversation_id",
        "message_id",
        "job_id",
        "backend",
    )

    @admin.display(description="score", ordering="score")
    def score_display(self, obj: ModerationEvent) -> str:
        return f"{obj.score:.2f}"

    @admin.display(description="text")
    def text_preview(self, obj: ModerationEvent) -> str:
        # a plain str: the admin escapes it (never mark_safe user text)
        return Truncator(obj.text).chars(TEXT_PREVIEW_CHARS)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False
