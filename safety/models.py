"""Moderation records: what the classifier caught (events) and what staff set per
category (policies).

No foreign key points into ``conversations`` or ``gateway`` (safety sits below them,
DESIGN §2): a conversation or message is referred to by its UUID, a generation by its
job id (in chat the answer's message id is the job id).
"""

from __future__ import annotations

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from safety.categories import Category, category_info


class Action(models.TextChoices):
    """What a category's match does to a request."""

    BLOCK = "block", "Block"
    FLAG = "flag", "Flag only (let through, record for review)"
    OFF = "off", "Off (ignore)"


class CategoryPolicy(models.Model):
    """Staff's threshold and action for one moderation category (admin-editable).

    ``threshold``: the score (0..1) at or above which the category matches; None uses
    the backend's own threshold (the embedded model's, chosen by cross-validation, or
    ``SAFETY_THRESHOLDS``). ``action``: block the request, flag it (let it through and
    record an event) or ignore the category. Read through
    :func:`safety.selectors.safety_config` (cached per process for
    SAFETY_CONFIG_CACHE_S seconds). A category without a row gets its shipped
    policy (:data:`safety.selectors.SHIPPED_POLICIES`).
    """

    category = models.CharField(max_length=32, choices=Category.choices, unique=True)
    threshold = models.FloatField(
        null=True,
        blank=True,
        validators=[MinValueValidator(0.0), MaxValueValidator(1.0)],
        help_text="Score from 0 to 1 at or above which this category matches. "
        "Empty: the classifier's own threshold.",
    )
    action = models.CharField(
        max_length=8, choices=Action.choices, default=Action.BLOCK
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["category"]
        verbose_name_plural = "category policies"
        constraints = [
            models.CheckConstraint(
                condition=models.Q(threshold__isnull=True)
                | models.Q(threshold__gte=0.0, threshold__lte=1.0),
                name="category_policy_threshold_0_1",
            )
        ]

    def __str__(self) -> str:
        return f"{self.get_category_display()}: {self.get_action_display()}"

    @property
    def description(self) -> str:
        """What the category covers (for staff)."""
        return category_info(self.category).description


class ModerationEvent(models.Model):
    """One moderated text that matched a category: blocked or flagged, for review.

    ``text`` is the whole offending text (input: the user's message; output: the
    generated text); ``score`` the matched category's score (0..1), ``scores`` every
    category's. ``status`` is staff's review (new → confirmed / dismissed).
    ``abuse``: whether the block counts toward the user's abuse score (a confident
    block, or one a second stage confirmed: :func:`safety.services.block_counts`);
    a borderline block refuses the text and adds nothing.
    """

    class Surface(models.TextChoices):
        CHAT = "chat", "Chat"
        API = "api", "API"
        IMPORT = "import", "Import"
        MEMORY = "memory", "Memory"

    class Direction(models.TextChoices):
        INPUT = "input", "Input"
        OUTPUT = "output", "Output"

    class EventAction(models.TextChoices):
        BLOCK = "block", "Blocked"
        FLAG = "flag", "Flagged"

    class Status(models.TextChoices):
        NEW = "new", "New"
        CONFIRMED = "confirmed", "Confirmed"
        DISMISSED = "dismissed", "Dismissed"

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        related_name="moderation_events",
    )
    surface = models.CharField(max_length=8, choices=Surface.choices)
    direction = models.CharField(max_length=8, choices=Direction.choices)
    category = models.CharField(max_length=32, choices=Category.choices)
    score = models.FloatField()
    scores = models.JSONField(default=dict, blank=True)
    action = models.CharField(max_length=8, choices=EventAction.choices)
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.NEW)
    text = models.TextField()
    conversation_id = models.UUIDField(null=True, blank=True)
    message_id = models.UUIDField(null=True, blank=True)
    job_id = models.CharField(max_length=64, blank=True)
    backend = models.CharField(max_length=32)
    abuse = models.BooleanField(
        default=False, help_text="Counts toward the user's abuse score."
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["-created_at"], name="modevent_created"),
            models.Index(fields=["status", "-created_at"], name="modevent_status"),
            models.Index(fields=["category", "-created_at"], name="modevent_category"),
            models.Index(fields=["user", "-created_at"], name="modevent_user"),
        ]

    def __str__(self) -> str:
        return f"{self.get_action_display()} {self.get_category_display()} ({self.surface})"


class Suspension(models.Model):
    """A period during which a user may not generate (chat or API) or embed.

    Active while ``lifted_at`` is empty and ``until`` is in the future: it ends on time
    by itself (nothing has to run), or early when staff lift it. ``created_by`` is the
    staff member who suspended the user (None: the abuse score did, or a command run
    without a staff account).
    """

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        related_name="suspensions",
    )
    reason = models.TextField()
    until = models.DateTimeField()
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
    )
    # the blocked input that took the abuse score over the limit (None: staff or a
    # command suspended the user); an upheld appeal of it lifts the suspension
    cause = models.ForeignKey(
        ModerationEvent,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    lifted_at = models.DateTimeField(null=True, blank=True)
    lifted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
    )

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            # suspension_active: the user's unlifted suspensions, latest end first
            models.Index(
                fields=["user", "-until"],
                condition=models.Q(lifted_at__isnull=True),
                name="suspension_open",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.user} until {self.until:%Y-%m-%d %H:%M} UTC"


class Appeal(models.Model):
    """A user's "this was a mistake" about one of their moderation events.

    Lands in the moderation queue (admin) as ``open``; staff decide it ``upheld`` (a
    false positive: the event is dismissed, its abuse points removed, a suspension it
    caused lifted and its text kept as a :class:`HardNegative`) or ``rejected``
    (:func:`safety.appeals.appeal_decide`). One appeal per event.
    """

    class Status(models.TextChoices):
        OPEN = "open", "Open"
        UPHELD = "upheld", "Upheld (false positive)"
        REJECTED = "rejected", "Rejected"

    event = models.OneToOneField(
        ModerationEvent, on_delete=models.CASCADE, related_name="appeal"
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+"
    )
    comment = models.TextField(blank=True, default="")
    status = models.CharField(
        max_length=12, choices=Status.choices, default=Status.OPEN
    )
    created_at = models.DateTimeField(auto_now_add=True)
    decided_at = models.DateTimeField(null=True, blank=True)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
    )

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["status", "-created_at"], name="appeal_status")]

    def __str__(self) -> str:
        return f"Appeal of event {self.event_id} ({self.status})"


class HardNegative(models.Model):
    """A text the classifier flagged that staff judged harmless: training data for the
    next ``manage.py moderation_train`` (read as a benign example)."""

    text = models.TextField()
    category = models.CharField(
        max_length=32, choices=Category.choices, help_text="What it was flagged as."
    )
    event = models.ForeignKey(
        ModerationEvent,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"hard negative ({self.category}): {self.text[:40]}"
