"""Admin for conversations and messages (read-mostly moderation view)."""

from django.contrib import admin

from conversations.models import Conversation, Message


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
