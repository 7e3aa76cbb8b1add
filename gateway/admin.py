"""Admin of the gateway's data: plans, subscriptions, pools, usage records (report +
CSV), API keys, the semantic answer cache (read-only; delete entries to evict them)
and users' gateway preferences. The billing console's pages are
:mod:`accounts.billing`."""

from __future__ import annotations

import csv
import datetime as dt
from typing import Any

from django.contrib import admin, messages
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import path, reverse

from audit.admin import AuditedAdminMixin
from gateway import selectors, services
from gateway.models import (
    ApiKey,
    ModelPool,
    Plan,
    SemanticCacheEntry,
    Subscription,
    UsageRecord,
    UserPreference,
)

CSV_COLUMNS = [
    "day",
    "username",
    "model",
    "requests",
    "prompt_tokens",
    "completion_tokens",
    "cached_tokens",
    "cost",
]


@admin.register(ModelPool)
class ModelPoolAdmin(AuditedAdminMixin, admin.ModelAdmin):
    list_display = (
        "name",
        "kind",
        "engine",
        "model",
        "dimensions",
        "enabled",
        "max_context",
        "max_output_tokens",
        "price_input_per_1k",
        "price_output_per_1k",
        "fallback",
        "queue_threshold",
    )
    list_filter = ("enabled", "kind", "engine")
    list_editable = ("enabled",)


@admin.register(Plan)
class PlanAdmin(AuditedAdminMixin, admin.ModelAdmin):
    list_display = (
        "name",
        "tokens_per_minute",
        "tokens_per_day",
        "monthly_token_budget",
        "requests_per_minute",
        "key_requests_per_minute",
        "priority",
        "is_default",
    )
    filter_horizontal = ("allowed_pools",)


@admin.register(Subscription)
class SubscriptionAdmin(AuditedAdminMixin, admin.ModelAdmin):
    list_display = ("user", "plan", "created_at")
    list_filter = ("plan",)
    search_fields = ("user__username",)
    raw_id_fields = ("user",)


def _parse_date(value: str | None) -> dt.date | None:
    try:
        return dt.date.fromisoformat(value) if value else None
    except ValueError:
        return None


@admin.register(UsageRecord)
class UsageRecordAdmin(admin.ModelAdmin):
    """Per-request records, plus a per user/day/model report with totals and CSV."""

    list_display = (
        "created_at",
        "user",
        "pool",
        "model",
        "prompt_tokens",
        "completion_tokens",
        "cached_tokens",
        "cost",
        "status",
        "cache_hit",
        "ttft_ms",
        "latency_ms",
    )
    list_filter = ("status", "model", "pool", "cache_hit", "created_at")
    search_fields = ("user__username", "job_id")
    date_hierarchy = "created_at"
    actions = ["export_report_csv"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def get_urls(self) -> list[Any]:
        report = path(
            "report/",
            self.admin_site.admin_view(self.report_view),
            name="gateway_usagerecord_report",
        )
        return [report, *super().get_urls()]

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        extra = {"report_url": reverse("admin:gateway_usagerecord_report")}
        return super().changelist_view(request, {**extra, **(extra_context or {})})

    def report_view(self, request: HttpRequest) -> HttpResponse:
        """Usage per user / UTC day / model with totals; ``?format=csv`` downloads it.

        ``?start=YYYY-MM-DD&end=YYYY-MM-DD`` (inclusive) filter the days.
        """
        start = _parse_date(request.GET.get("start"))
        end = _parse_date(request.GET.get("end"))
        rows, totals = selectors.usage_by_user_day_model(start=start, end=end)
        if request.GET.get("format") == "csv":
            return _csv_response(rows, totals)
        context = {
            **self.admin_site.each_context(request),
            "title": "Usage per user, day and model",
            "opts": self.model._meta,
            "rows": rows,
            "totals": totals,
            "start": start,
            "end": end,
        }
        return TemplateResponse(request, "admin/gateway/usage_report.html", context)

    @admin.action(description="Export usage per user/day/model (CSV) for selected")
    def export_report_csv(self, request: HttpRequest, queryset: Any) -> HttpResponse:
        ids = list(queryset.values_list("pk", flat=True))
        return _csv_response(*selectors.usage_by_user_day_model(ids=ids))


def _csv_response(rows: list[dict[str, Any]], totals: dict[str, Any]) -> HttpResponse:
    response = HttpResponse(content_type="text/csv")
    response["Content-Disposition"] = 'attachment; filename="usage.csv"'
    writer = csv.writer(response)
    writer.writerow(CSV_COLUMNS)
    for row in rows:
        writer.writerow([row[c] for c in CSV_COLUMNS])
    writer.writerow(["TOTAL", "", ""] + [totals.get(c) or 0 for c in CSV_COLUMNS[3:]])
    return response


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    """Keys are created here with a generated secret shown once; revoke is an action."""

    list_display = (
        "prefix",
        "name",
        "user",
        "created_at",
        "last_used_at",
        "revoked_at",
    )
    list_filter = ("revoked_at",)
    search_fields = ("user__username", "name", "prefix")
    raw_id_fields = ("user",)
    fields = ("user", "name", "prefix", "created_at", "last_used_at", "revoked_at")
    readonly_fields = ("prefix", "created_at", "last_used_at", "revoked_at")
    actions = ["revoke"]

    def save_model(
        self, request: HttpRequest, obj: ApiKey, form: Any, change: bool
    ) -> None:
        if change:
            super().save_model(request, obj, form, change)
            return
        key, raw = services.api_key_create(user=obj.user, name=obj.name)
        obj.pk = key.pk
        obj.refresh_from_db()
        messages.warning(
            request, f"New API key for {obj.user}: {raw} (copy it now; shown once)."
        )

    @admin.action(description="Revoke selected API keys")
    def revoke(self, request: HttpRequest, queryset: Any) -> None:
        for key in queryset:
            services.api_key_revoke(key_id=key.pk)
        self.message_user(request, f"Revoked {queryset.count()} key(s).")


@admin.register(SemanticCacheEntry)
class SemanticCacheEntryAdmin(admin.ModelAdmin):
    """Semantic-cache entries: read-only (they are written by settlement), deletable."""

    list_display = ("user", "model", "prompt", "finish_reason", "created_at")
    list_filter = ("model",)
    search_fields = ("user__username", "prompt")
    readonly_fields = [
        f.name for f in SemanticCacheEntry._meta.fields if f.name != "embedding"
    ]
    exclude = ("embedding",)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(UserPreference)
class UserPreferenceAdmin(admin.ModelAdmin):
    list_display = ("user", "reuse_cached_answers", "updated_at")
    list_filter = ("reuse_cached_answers",)
    search_fields = ("user__username",)
    raw_id_fields = ("user",)
