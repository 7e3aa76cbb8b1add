"""Gateway data: plans, pools, usage records, API keys, semantic cache, user
preferences (DESIGN §7).

Token limits are in tokens (prompt + completion); prices are in currency units per 1,000
tokens. An empty limit means "no limit".
"""

from __future__ import annotations

from decimal import Decimal

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone
from pgvector.django import HnswIndex, VectorField

from inference.embeddings import EMBEDDING_DIM


class ModelPool(models.Model):
    """A set of inference workers serving one model (their queue is ``inf:q:{name}``).

    ``kind`` says what the pool serves: ``chat`` (token streams, routed by
    :mod:`gateway.routing`) or ``embedding`` (vectors, :mod:`gateway.embeddings` and
    ``/v1/embeddings``); neither kind is ever routed to the other's requests. An
    embedding pool declares ``dimensions``, the length of its vectors, which must equal
    the stored vectors' (``inference.embeddings.EMBEDDING_DIM``, 384): a mismatch is
    a startup error (:mod:`gateway.checks`).

    ``queue_threshold`` is the number of waiting jobs (queued, not yet taken by a
    worker) above which the pool counts as saturated and requests go to ``fallback``.
    """

    class Kind(models.TextChoices):
        CHAT = "chat"
        EMBEDDING = "embedding"

    class Engine(models.TextChoices):
        LLAMACPP = "llamacpp"
        VLLM = "vllm"
        OPENAI = "openai"
        SCRIPTED = "scripted"
        SENTENCE_TRANSFORMERS = "sentence-transformers"

    name = models.SlugField(max_length=100, unique=True)
    kind = models.CharField(
        max_length=16,
        choices=Kind.choices,
        default=Kind.CHAT,
        help_text="Chat pools answer chat completions; embedding pools serve vectors.",
    )
    engine = models.CharField(
        max_length=32, choices=Engine.choices, default=Engine.LLAMACPP
    )
    model = models.CharField(max_length=200, help_text="Model name shown to users.")
    dimensions = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Embedding pools: the dimension of the vectors the model makes "
        f"(must be {EMBEDDING_DIM}, the stored vectors' dimension).",
    )
    max_context = models.PositiveIntegerField(
        default=4096, help_text="Context window, tokens."
    )
    max_output_tokens = models.PositiveIntegerField(
        default=1024, help_text="Largest max_tokens accepted, tokens."
    )
    price_input_per_1k = models.DecimalField(
        max_digits=12, decimal_places=6, default=Decimal("0")
    )
    price_output_per_1k = models.DecimalField(
        max_digits=12, decimal_places=6, default=Decimal("0")
    )
    fallback = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="fallback_for",
        help_text="Where requests go when this pool is saturated.",
    )
    enabled = models.BooleanField(default=True)
    queue_threshold = models.PositiveIntegerField(
        default=32, help_text="Waiting jobs above which the pool is saturated."
    )

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return f"{self.name} ({self.model})"

    @property
    def is_embedding(self) -> bool:
        """True for a pool that serves vectors, not chat answers."""
        return self.kind == self.Kind.EMBEDDING


class Plan(models.Model):
    """Token and API request limits and the pools a user may use. Higher
    ``priority`` is shed last."""

    name = models.CharField(max_length=100, unique=True)
    tokens_per_minute = models.PositiveBigIntegerField(
        null=True, blank=True, help_text="Tokens per minute (empty: no limit)."
    )
    tokens_per_day = models.PositiveBigIntegerField(
        null=True, blank=True, help_text="Tokens per UTC day (empty: no limit)."
    )
    monthly_token_budget = models.PositiveBigIntegerField(
        null=True, blank=True, help_text="Tokens per UTC month (empty: no limit)."
    )
    # API requests per minute (gateway/requestrate.py), counted for the user across
    # their keys and for each key; beside the token limits above.
    requests_per_minute = models.PositiveIntegerField(
        null=True,
        blank=True,
        default=600,
        help_text="API requests per minute for the user, all keys (empty: no limit).",
    )
    key_requests_per_minute = models.PositiveIntegerField(
        null=True,
        blank=True,
        default=300,
        help_text="API requests per minute for each API key (empty: no limit).",
    )
    allowed_pools = models.ManyToManyField(ModelPool, blank=True, related_name="plans")
    priority = models.IntegerField(
        default=0, help_text="Higher is served first; the lowest is shed first."
    )
    is_default = models.BooleanField(
        default=False, help_text="The plan of users without a subscription."
    )

    class Meta:
        ordering = ["priority", "name"]
        constraints = [
            models.UniqueConstraint(
                fields=["is_default"],
                condition=Q(is_default=True),
                name="one_default_plan",
            )
        ]

    def __str__(self) -> str:
        return self.name


class Subscription(models.Model):
    """The plan of one user (users without one are on the default plan)."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="subscription"
    )
    plan = models.ForeignKey(
        Plan, on_delete=models.PROTECT, related_name="subscriptions"
    )
    created_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"{self.user} → {self.plan}"


class UsageRecord(models.Model):
    """One request's usage and cost, written once when its generation is settled."""

    class Status(models.TextChoices):
        COMPLETE = "complete"
        CANCELLED = "cancelled"
        ERROR = "error"
        FILTERED = "filtered"

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="usage_records"
    )
    pool = models.CharField(max_length=100, blank=True, default="")
    model = models.CharField(max_length=200, blank=True, default="")
    prompt_tokens = models.PositiveIntegerField(default=0)
    completion_tokens = models.PositiveIntegerField(default=0)
    cached_tokens = models.PositiveIntegerField(default=0)
    cost = models.DecimalField(max_digits=14, decimal_places=6, default=Decimal("0"))
    ttft_ms = models.PositiveIntegerField(null=True, blank=True)
    latency_ms = models.PositiveIntegerField(null=True, blank=True)
    cache_hit = models.BooleanField(default=False)
    status = models.CharField(max_length=16, choices=Status.choices)
    job_id = models.CharField(max_length=64, unique=True)
    message_id = models.UUIDField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["user", "created_at"], name="usage_user_created"),
            models.Index(fields=["created_at"], name="usage_created"),
        ]

    def __str__(self) -> str:
        return f"{self.user} {self.model} {self.total_tokens} tokens"

    @property
    def total_tokens(self) -> int:
        """Prompt plus completion tokens."""
        return self.prompt_tokens + self.completion_tokens


class ApiKey(models.Model):
    """A Bearer key for the API. Only its SHA-256 is stored; ``prefix`` identifies it."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_keys"
    )
    name = models.CharField(max_length=100, blank=True, default="")
    prefix = models.CharField(max_length=16, editable=False)
    key_hash = models.CharField(max_length=64, unique=True, editable=False)
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.name or 'unnamed'})"

    @property
    def is_active(self) -> bool:
        """True until the key is revoked."""
        return self.revoked_at is None


class UserPreference(models.Model):
    """A user's gateway preferences (no row: every preference at its default).

    ``reuse_cached_answers``: the user's chat turns may be answered from their own
    earlier answers (gateway.cache: the opt-in of a request at temperature > 0).
    ``default_model``: the pool the chat uses when the user picks none (empty: routing).
    """

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        related_name="gateway_preference",
    )
    reuse_cached_answers = models.BooleanField(
        default=False,
        help_text="Answer identical or near-identical questions from the user's "
        "own earlier answers (no tokens used).",
    )
    default_model = models.CharField(
        max_length=100,
        blank=True,
        default="",
        help_text="Pool name the chat uses when no model is chosen (empty: routing).",
    )
    updated_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"preferences of {self.user}"


class SemanticCacheEntry(models.Model):
    """A complete answer to a single-turn prompt without personal context (gateway.cache).

    Looked up by cosine similarity of ``embedding`` (all-MiniLM-L6-v2, 384-d, unit
    length) to a new prompt, only within the same scope: ``user``, ``model`` (the pool's
    model), ``system_hash`` (SHA-256 of the system prompt) and ``params_hash`` (SHA-256
    of the sampling parameters). ``prompt_hash`` (SHA-256 of the prompt text) makes one
    row per identical prompt in a scope (a newer answer replaces it).
    ``prompt_tokens``/``completion_tokens``: the usage of the generation that wrote
    the answer, which a hit reports (0: not known).
    """

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+"
    )
    model = models.CharField(max_length=200)
    system_hash = models.CharField(max_length=64)
    params_hash = models.CharField(max_length=64)
    prompt_hash = models.CharField(max_length=64)
    prompt = models.TextField()
    embedding = VectorField(dimensions=EMBEDDING_DIM)
    answer = models.TextField()
    answer_model = models.CharField(
        max_length=200, blank=True, default="", help_text="Model that wrote the answer."
    )
    finish_reason = models.CharField(max_length=32)
    prompt_tokens = models.PositiveIntegerField(
        default=0, help_text="Prompt tokens of the generation that wrote the answer."
    )
    completion_tokens = models.PositiveIntegerField(
        default=0,
        help_text="Completion tokens of the generation that wrote the answer.",
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["user", "model", "system_hash", "params_hash", "prompt_hash"],
                name="semantic_cache_one_per_prompt",
            )
        ]
        indexes = [
            models.Index(fields=["created_at"], name="semantic_cache_created"),
            HnswIndex(
                name="semantic_cache_embedding_hnsw",
                fields=["embedding"],
                m=16,
                ef_construction=64,
                opclasses=["vector_cosine_ops"],
            ),
        ]

    def __str__(self) -> str:
        return f"{self.user_id} {self.model}: {self.prompt[:40]}"


__all__ = [
    "ApiKey",
    "ModelPool",
    "Plan",
    "SemanticCacheEntry",
    "Subscription",
    "UsageRecord",
    "UserPreference",
]
