"""Admin for conversations and messages (read-mostly moderation view) and for the
feedback users give answers (list with filters, per-model satisfaction per day)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html

from conversations import feedback_selectors
from conversations.models import Conversation, Feedback, Message


class MessageInline(admin.TabularInline):
    model = Message
    extra = 0
    fields = (
        "role",
        "status",
        "content",
        "model",
        "token_count",
        "ttft_ms",
        "latency_ms",
        "created_at",
    )
    readonly_fields = fields
    ordering = ("created_at",)
    show_change_link = True


@admin.register(Conversation)
class ConversationAdmin(admin.ModelAdmin):
    list_display = ("title", "user", "created_at", "updated_at", "archived")
    list_filter = ("archived",)
    search_fields = ("title", "user__username")
    raw_id_fields = ("summary_upto", "current_leaf")
    inlines = [MessageInline]


@admin.register(Message)
class MessageAdmin(admin.ModelAdmin):
    list_display = (
        "id",
        "conversation",
        "role",
        "status",
        "model",
        "token_count",
        "ttft_ms",
        "created_at",
    )
    list_filter = ("role", "status", "model")
    search_fields = ("content",)
    raw_id_fields = ("conversation", "parent")


def _day(value: str | None) -> dt.date | None:
    try:
        return dt.date.fromisoformat(value) if value else None
    except ValueError:
        return None


@admin.register(Feedback)
class FeedbackAdmin(admin.ModelAdmin):
    """Ratings of answers: read-only (users give them), filterable, one click from the
    conversation; ``satisfaction/`` shows the share of thumbs up per model and day."""

    list_display = (
        "updated_at",
        "rating",
        "reason",
        "model",
        "pool",
        "plan",
        "user",
        "short_comment",
        "conversation_link",
    )
    list_filter = ("rating", "reason", "model", "pool", "plan", "updated_at")
    search_fields = ("comment", "user__username", "message__content")
    date_hierarchy = "updated_at"
    list_select_related = ("user", "message")
    readonly_fields = [f.name for f in Feedback._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description="comment")
    def short_comment(self, obj: Feedback) -> str:
        return obj.comment[:80] + ("…" if len(obj.comment) > 80 else "")

    @admin.display(description="conversation")
    def conversation_link(self, obj: Feedback) -> str:
        url = reverse(
            "admin:conversations_conversation_change",
            args=[obj.message.conversation_id],
        )
        return format_html('<a href="{}">open</a>', url)

    def get_urls(self) -> list[Any]:
        view = path(
            "satisfaction/",
            self.admin_site.admin_view(self.satisfaction_view),
            name="conversations_feedback_satisfaction",
        )
        return [view, *super().get_urls()]

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        extra = {
            "satisfaction_url": reverse("admin:conversations_feedback_satisfaction")
        }
        return super().changelist_view(request, {**extra, **(extra_context or {})})

    def satisfaction_view(self, request: HttpRequest) -> HttpResponse:
        """Thumbs up share and counts per model and UTC day;
        ``?start=YYYY-MM-DD&end=YYYY-MM-DD`` (inclusive) bound the days."""
        start = _day(request.GET.get("start"))
        end = _day(request.GET.get("end"))
        context = {
            **self.admin_site.each_context(request),
            "title": "Satisfaction per model and day",
            "opts": self.model._meta,
            "rows": feedback_selectors.feedback_satisfaction(start=start, end=end),
            "start": start,
            "end": end,
        }
        return TemplateResponse(
            request, "admin/conversations/feedback_satisfaction.html", context
        )
