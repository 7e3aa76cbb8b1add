"""Evaluation data: sets of cases, runs of a set against a pool, one result per case
run (DESIGN §11). Each model names its table (``Meta.db_table``, ``gateway_eval*``):
the tables were created by gateway/migrations/0007_evaluation.py and are used as
they are (evaluation/migrations/0001_initial.py changes Django's state only).

Times are milliseconds, token counts tokens, costs currency units (the pool's prices).
"""

from __future__ import annotations

from decimal import Decimal

from django.conf import settings
from django.db import models
from django.utils import timezone


class EvalSet(models.Model):
    """A named set of evaluation cases."""

    name = models.SlugField(max_length=100, unique=True)
    description = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        db_table = "gateway_evalset"
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class EvalCase(models.Model):
    """One prompt and the checks its answer is held to.

    ``messages``: OpenAI chat messages (``[{"role", "content"}]``, ending with a user
    message); ``system_prompt`` is sent first when set. ``checks``: a list of
    ``{"type": ..., "value": ...}`` (:data:`evaluation.checks.CHECK_TYPES`).
    ``params``: sampling parameters sent with it (``max_tokens``, ``temperature``...).
    ``judge_pool``/``rubric``: an optional judge model asked whether the answer meets
    the rubric (a ``judge`` check).
    """

    eval_set = models.ForeignKey(
        EvalSet, on_delete=models.CASCADE, related_name="cases"
    )
    name = models.CharField(max_length=100)
    ordinal = models.PositiveIntegerField(default=0)
    category = models.CharField(max_length=50, blank=True, default="")
    messages = models.JSONField()
    system_prompt = models.TextField(blank=True, default="")
    checks = models.JSONField(default=list)
    params = models.JSONField(default=dict, blank=True)
    judge_pool = models.CharField(max_length=100, blank=True, default="")
    rubric = models.TextField(blank=True, default="")

    class Meta:
        db_table = "gateway_evalcase"
        ordering = ["eval_set", "ordinal", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["eval_set", "name"], name="eval_case_unique_name"
            )
        ]

    def __str__(self) -> str:
        return f"{self.eval_set_id}/{self.name}"


class EvalRun(models.Model):
    """One run of a set against a pool, each case ``repeat`` times.

    ``done`` counts the case runs finished out of ``total`` (cases × repeat): the
    progress the admin and ``run_eval`` show.
    """

    class Status(models.TextChoices):
        PENDING = "pending"
        RUNNING = "running"
        COMPLETE = "complete"
        FAILED = "failed"

    eval_set = models.ForeignKey(EvalSet, on_delete=models.CASCADE, related_name="runs")
    pool = models.CharField(max_length=100)
    status = models.CharField(
        max_length=16, choices=Status.choices, default=Status.PENDING
    )
    repeat = models.PositiveIntegerField(default=1)
    total = models.PositiveIntegerField(default=0)
    done = models.PositiveIntegerField(default=0)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    error = models.TextField(blank=True, default="")

    class Meta:
        db_table = "gateway_evalrun"
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"run {self.pk}: {self.eval_set_id} on {self.pool}"

    @property
    def progress(self) -> str:
        """``done/total`` case runs."""
        return f"{self.done}/{self.total}"


class EvalResult(models.Model):
    """One case run: the answer, each check's verdict and what it cost.

    ``check_results``: ``[{"type", "passed", "detail"}]`` in the case's check order;
    ``passed``: every check passed and the generation did not fail. ``error``: why no
    answer came (refused at admission, shed for too long, engine error), "" otherwise.
    ``started_at``/``finished_at`` bracket the request (submission to settlement).
    """

    run = models.ForeignKey(EvalRun, on_delete=models.CASCADE, related_name="results")
    case = models.ForeignKey(EvalCase, on_delete=models.CASCADE, related_name="results")
    repeat_index = models.PositiveIntegerField(default=0)
    output = models.TextField(blank=True, default="")
    finish_reason = models.CharField(max_length=32, blank=True, default="")
    check_results = models.JSONField(default=list)
    passed = models.BooleanField(default=False)
    error = models.TextField(blank=True, default="")
    pool = models.CharField(max_length=100, blank=True, default="")
    model = models.CharField(max_length=200, blank=True, default="")
    latency_ms = models.PositiveIntegerField(null=True, blank=True)
    ttft_ms = models.PositiveIntegerField(null=True, blank=True)
    prompt_tokens = models.PositiveIntegerField(default=0)
    completion_tokens = models.PositiveIntegerField(default=0)
    cost = models.DecimalField(max_digits=14, decimal_places=6, default=Decimal("0"))
    attempts = models.PositiveIntegerField(default=1)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "gateway_evalresult"
        ordering = ["run", "case__ordinal", "case_id", "repeat_index"]
        constraints = [
            models.UniqueConstraint(
                fields=["run", "case", "repeat_index"], name="eval_result_one_per_run"
            )
        ]

    def __str__(self) -> str:
        return f"{self.case} #{self.repeat_index}: {'pass' if self.passed else 'fail'}"
