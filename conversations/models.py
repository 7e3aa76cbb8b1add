"""Conversation and Message (DESIGN §7)."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.contrib.postgres.indexes import GinIndex
from django.contrib.postgres.search import SearchVector, SearchVectorField
from django.db import models
from django.db.models import Q
from django.utils import timezone

# The text-search configuration in Django's model state only: the database generates
# the ``search_vector`` columns with CHAT_SEARCH_CONFIG as it was when migration 0006
# ran (conversations/search_sql.py, `manage.py search_config_apply`); Django never
# writes these columns, so this value is never used to compute one.
SEARCH_STATE_CONFIG = "english"


def _search_vector(column: str) -> models.GeneratedField:
    return models.GeneratedField(
        expression=SearchVector(column, config=SEARCH_STATE_CONFIG),
        output_field=SearchVectorField(),
        db_persist=True,
    )


class DocumentScope(models.TextChoices):
    """Which documents a conversation's answers search (retrieval, memory/)."""

    ALL = "all", "All"
    NONE = "none", "None"
    SOME = "some", "Chosen"


class Conversation(models.Model):
    """A thread of messages owned by one user."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="conversations"
    )
    title = models.CharField(max_length=200)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)
    summary = models.TextField(blank=True, default="")
    summary_upto = models.ForeignKey(
        "Message", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    archived = models.BooleanField(default=False)
    # full-text search vector of the title, kept by PostgreSQL (conversations.search)
    search_vector = _search_vector("title")
    # The last message of the branch the user sees: the thread shown and sent
    # as history is the path from the root to it. Null only before the first message.
    current_leaf = models.ForeignKey(
        "Message", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # Which of the user's documents answers in this thread may quote: all,
    # none, or the chosen ``scope_documents`` (a deleted document drops out of them).
    doc_scope = models.CharField(
        max_length=8, choices=DocumentScope.choices, default=DocumentScope.ALL
    )
    scope_documents = models.ManyToManyField(
        "memory.Document", blank=True, related_name="+"
    )

    class Meta:
        ordering = ["-updated_at"]
        indexes = [
            models.Index(fields=["user", "-updated_at"], name="conv_user_updated"),
            GinIndex(fields=["search_vector"], name="conv_search_gin"),
        ]

    def __str__(self) -> str:
        return self.title


class MessageManager(models.Manager["Message"]):
    """Messages without their search vector: only the database's search reads it, and
    loading it would about double what every thread read moves (a vector is about
    the size of the text)."""

    def get_queryset(self) -> models.QuerySet[Message]:
        """All messages, ``search_vector`` deferred."""
        return super().get_queryset().defer("search_vector")


class Message(models.Model):
    """One message of a conversation's tree.

    ``parent``: an answer's is the user message it answers; a user message's is the
    answer it follows (None for a first message). Regenerating adds a sibling answer,
    editing a user message a sibling user message; messages with the same parent and
    role are versions of each other, and ``Conversation.current_leaf`` picks the branch.

    An answer that uses tools is a chain: user → assistant with ``tool_calls``
    (finish reason ``tool_calls``) → one ``tool`` message per call, each the parent of
    the next → the next assistant message (more calls, or the answer). Every link is a
    parent, so the path to the answer holds the whole chain, and a regenerated answer
    (a sibling of the chain's first assistant message) replaces all of it on its branch.
    """

    class Role(models.TextChoices):
        USER = "user"
        ASSISTANT = "assistant"
        SYSTEM = "system"
        TOOL = "tool"

    class CacheKind(models.TextChoices):
        NONE = "", "generated"
        EXACT = "exact"
        SEMANTIC = "semantic"

    class Status(models.TextChoices):
        STREAMING = "streaming"
        COMPLETE = "complete"
        CANCELLED = "cancelled", "stopped"
        ERROR = "error"
        FILTERED = "filtered"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    conversation = models.ForeignKey(
        Conversation, on_delete=models.CASCADE, related_name="messages"
    )
    role = models.CharField(max_length=16, choices=Role.choices)
    content = models.TextField(blank=True, default="")
    status = models.CharField(
        max_length=16, choices=Status.choices, default=Status.COMPLETE
    )
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.CASCADE, related_name="replies"
    )
    created_at = models.DateTimeField(default=timezone.now)
    # Tokens: token_count is this message's own generated tokens (assistant) ; prompt_tokens
    # is the whole prompt the engine saw for it, cached_tokens the part served from KV cache.
    token_count = models.PositiveIntegerField(null=True, blank=True)
    prompt_tokens = models.PositiveIntegerField(null=True, blank=True)
    cached_tokens = models.PositiveIntegerField(null=True, blank=True)
    model = models.CharField(max_length=200, blank=True, default="")
    pool = models.CharField(max_length=100, blank=True, default="")
    finish_reason = models.CharField(max_length=32, blank=True, default="")
    error = models.TextField(blank=True, default="")
    ttft_ms = models.PositiveIntegerField(null=True, blank=True)
    latency_ms = models.PositiveIntegerField(null=True, blank=True)
    # an answer served from the gateway's answer caches (gateway.cache), not generated
    cache_kind = models.CharField(
        max_length=16, choices=CacheKind.choices, blank=True, default=CacheKind.NONE
    )
    # The answer was written without the user's memory and documents because no
    # embedding worker could embed the question (the footer says so).
    memory_unavailable = models.BooleanField(default=False)
    # An imported message input moderation flagged (the category's code): kept and
    # shown, marked, but never sent in a prompt (conversations.selectors).
    moderation_category = models.CharField(max_length=32, blank=True, default="")
    # An assistant message that calls tools: the calls in the model's order, each
    # {"id": "call_…", "name": str, "arguments": str}, ``arguments`` the JSON text
    # exactly as generated (never re-serialised). Empty on every other message.
    tool_calls = models.JSONField(default=list, blank=True)
    # A tool result (role "tool"): the id of the call it answers (one of the
    # ``tool_calls`` of the chain's assistant message above it) and the tool's name;
    # ``content`` is the result text as the tool returned it (bounded by the tool).
    tool_call_id = models.CharField(max_length=100, blank=True, default="")
    tool_name = models.CharField(max_length=200, blank=True, default="")
    # What the page shows of a tool result (conversations.tool_steps.detail_clean):
    # {"label": str ("Ran Python"), "truncated": bool, "error": bool}.
    tool_detail = models.JSONField(default=dict, blank=True)
    # An answer continued in place ("Continue"): the generation that writes or last
    # wrote it (null: its first and only one, whose job id is the message's own id),
    # and when that generation was enqueued (null: ``created_at``).
    job = models.UUIDField(null=True, blank=True, unique=True)
    job_enqueued_at = models.DateTimeField(null=True, blank=True)
    # full-text search vector of the content, kept by PostgreSQL (conversations.search)
    search_vector = _search_vector("content")

    objects = MessageManager()

    class Meta:
        ordering = ["created_at"]
        indexes = [
            models.Index(
                fields=["conversation", "created_at"], name="msg_conv_created"
            ),
            GinIndex(fields=["search_vector"], name="msg_search_gin"),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["conversation"],
                condition=Q(status="streaming"),
                name="one_streaming_answer_per_conversation",
            )
        ]

    def __str__(self) -> str:
        return f"{self.role}: {self.content[:40]}"

    @property
    def job_id(self) -> str:
        """The inference job id of an assistant message's latest generation: its own
        id, or ``job`` once it was continued."""
        return str(self.job or self.id)

    @property
    def enqueued_at(self) -> float:
        """Epoch seconds at which the latest generation of the answer was enqueued."""
        return (self.job_enqueued_at or self.created_at).timestamp()


class Feedback(models.Model):
    """A user's rating of one assistant message version (thumbs up/down).

    Each answer version (a regenerated sibling is its own Message) has its own
    feedback; one row per user and message, replaced whole when the rating changes.
    ``pool``/``model``/``plan``/``ttft_ms``/token counts are copied from the answer and
    its usage record when the rating is given, so analysis needs no join and survives
    a plan change. ``ttft_ms`` in milliseconds; token counts in tokens.
    """

    class Rating(models.TextChoices):
        UP = "up", "thumbs up"
        DOWN = "down", "thumbs down"

    class Reason(models.TextChoices):
        # thumbs up
        ACCURATE = "accurate", "Accurate"
        CLEAR = "clear", "Clear and well written"
        # thumbs down
        WRONG = "wrong", "Incorrect or made up"
        UNHELPFUL = "unhelpful", "Not helpful"
        INSTRUCTIONS = "instructions", "Did not follow instructions"
        REFUSED = "refused", "Refused without good reason"
        UNSAFE = "unsafe", "Harmful or offensive"
        FORMAT = "format", "Too long or badly formatted"
        OTHER = "other", "Other"

    id = models.BigAutoField(primary_key=True)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="feedback"
    )
    message = models.ForeignKey(
        Message, on_delete=models.CASCADE, related_name="feedback"
    )
    rating = models.CharField(max_length=8, choices=Rating.choices)
    reason = models.CharField(
        max_length=16, choices=Reason.choices, blank=True, default=""
    )
    comment = models.TextField(blank=True, default="")
    pool = models.CharField(max_length=100, blank=True, default="")
    model = models.CharField(max_length=200, blank=True, default="")
    plan = models.CharField(max_length=100, blank=True, default="")
    ttft_ms = models.PositiveIntegerField(null=True, blank=True)
    prompt_tokens = models.PositiveIntegerField(null=True, blank=True)
    completion_tokens = models.PositiveIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-updated_at"]
        verbose_name_plural = "feedback"
        constraints = [
            models.UniqueConstraint(
                fields=["user", "message"], name="one_feedback_per_user_message"
            )
        ]
        indexes = [
            models.Index(fields=["model", "updated_at"], name="feedback_model_updated"),
            models.Index(fields=["updated_at"], name="feedback_updated"),
        ]

    def __str__(self) -> str:
        return f"{self.rating} on {self.message_id} ({self.model or 'unknown model'})"
