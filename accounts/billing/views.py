"""The billing console's admin pages (``/admin/billing/``, staff only).

One page with a UTC date range (default: the last 30 days): tokens and cost per day
and per model as SVG bar charts, and four tables (per day, per model, top users by
spend with plan and remaining quota, per-pool load); each table downloads as CSV
with the same range (``/admin/billing/<table>.csv``). The tables are defined once
(:data:`TABLES`) for the page and the CSV alike.
"""

from __future__ import annotations

import csv
from collections.abc import Callable
from dataclasses import dataclass
from functools import wraps
from typing import Any

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import reverse

from accounts.billing import charts
from chatsite.errors import InvalidInput
from gateway.billing import selectors
from gateway.billing.selectors import DateRange, PoolLoad, UsageRow, UserSpend

# Models with the most cost shown in the per-model charts (the table lists all).
CHART_MODELS = 12
# Users listed under "top users by spend".
TOP_USERS = 20
# Who may open the console besides being staff: the usage records' view permission.
PERMISSION = "gateway.view_usagerecord"


def _ms(value: float | None) -> str | float:
    return "" if value is None else round(value, 1)


def _left(window: selectors.QuotaLeft | None, attr: str) -> str | int:
    return "" if window is None else getattr(window, attr)


@dataclass(frozen=True)
class Table:
    """A table of the console: a title and (CSV header, cell of a row) columns.

    Cells are the raw values (tokens, currency units, ms); an empty cell means none
    (no limit, no TTFT measured)."""

    title: str
    columns: list[tuple[str, Callable[[Any], Any]]]

    @property
    def headers(self) -> list[str]:
        """The column names (the CSV header)."""
        return [name for name, _ in self.columns]

    def cells(self, rows: list[Any]) -> list[list[Any]]:
        """Each row's cells, in column order."""
        return [[cell(row) for _, cell in self.columns] for row in rows]


_USAGE_COLUMNS: list[tuple[str, Callable[[UsageRow], Any]]] = [
    ("requests", lambda r: r.requests),
    ("prompt_tokens", lambda r: r.prompt_tokens),
    ("completion_tokens", lambda r: r.completion_tokens),
    ("total_tokens", lambda r: r.total_tokens),
    ("cost", lambda r: r.cost),
]
_USER_COLUMNS: list[tuple[str, Callable[[UserSpend], Any]]] = [
    ("username", lambda u: u.username),
    ("plan", lambda u: u.plan),
    ("requests", lambda u: u.requests),
    ("total_tokens", lambda u: u.tokens),
    ("cost", lambda u: u.cost),
    ("day_limit", lambda u: _left(u.left_today, "limit")),
    ("day_remaining", lambda u: _left(u.left_today, "remaining")),
    ("month_limit", lambda u: _left(u.left_this_month, "limit")),
    ("month_remaining", lambda u: _left(u.left_this_month, "remaining")),
]
_POOL_COLUMNS: list[tuple[str, Callable[[PoolLoad], Any]]] = [
    ("pool", lambda p: p.pool),
    ("requests", lambda p: p.requests),
    ("errors", lambda p: p.errors),
    ("error_rate", lambda p: round(p.error_rate, 4)),
    ("ttft_p50_ms", lambda p: _ms(p.ttft_p50_ms)),
    ("ttft_p99_ms", lambda p: _ms(p.ttft_p99_ms)),
    ("total_tokens", lambda p: p.tokens),
]

TABLES: dict[str, Table] = {
    "days": Table("Usage per day (UTC)", [("day", lambda r: r.key), *_USAGE_COLUMNS]),
    "models": Table("Usage per model", [("model", lambda r: r.key), *_USAGE_COLUMNS]),
    "users": Table("Top users by spend", _USER_COLUMNS),
    "pools": Table("Load per pool", _POOL_COLUMNS),
}


def _rows(name: str, period: DateRange) -> list[Any]:
    if name == "days":
        return selectors.usage_by(period=period, by="day")
    if name == "models":
        return selectors.usage_by(period=period, by="model")
    if name == "users":
        return selectors.top_users_by_spend(period=period, limit=TOP_USERS)
    return selectors.pool_load(period=period)


def _charts(days: list[UsageRow], models: list[UsageRow]) -> list[charts.BarChart]:
    top = models[:CHART_MODELS]
    shown = f" (top {CHART_MODELS} by cost)" if len(models) > CHART_MODELS else ""
    return [
        charts.bar_chart(
            title="Tokens per day",
            points=[(r.key, r.total_tokens) for r in days],
            format_value=charts.tokens_text,
            format_tick=charts.tokens_tick,
            integer=True,
            short_label=lambda key: key[5:],  # MM-DD
        ),
        charts.bar_chart(
            title="Cost per day",
            points=[(r.key, float(r.cost)) for r in days],
            format_value=charts.cost_text,
            format_tick=charts.cost_tick,
            short_label=lambda key: key[5:],
        ),
        charts.bar_chart(
            title=f"Tokens per model{shown}",
            points=[(r.key, r.total_tokens) for r in top],
            format_value=charts.tokens_text,
            format_tick=charts.tokens_tick,
            integer=True,
        ),
        charts.bar_chart(
            title=f"Cost per model{shown}",
            points=[(r.key, float(r.cost)) for r in top],
            format_value=charts.cost_text,
            format_tick=charts.cost_tick,
        ),
    ]


def _staff_view(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """Admin login for anyone not staff (a redirect), 403 for staff without the
    usage records' view permission; CSP and CSRF as every admin page."""

    @wraps(view)
    def checked(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not request.user.has_perm(PERMISSION):
            raise PermissionDenied("You may not view usage and billing.")
        return view(request, *args, **kwargs)

    return admin.site.admin_view(checked)


def _period(request: HttpRequest) -> DateRange:
    return selectors.date_range_parse(
        start=request.GET.get("start"), end=request.GET.get("end")
    )


@_staff_view
def console(request: HttpRequest) -> HttpResponse:
    """The console page; a bad range shows its error (400) instead of the figures."""
    context: dict[str, Any] = {
        **admin.site.each_context(request),
        "title": "Billing console",
        "start": request.GET.get("start", ""),
        "end": request.GET.get("end", ""),
    }
    try:
        period = _period(request)
    except InvalidInput as exc:
        context["error"] = exc.message
        return TemplateResponse(
            request, "admin/billing/console.html", context, status=400
        )
    query = f"?start={period.start:%Y-%m-%d}&end={period.end:%Y-%m-%d}"
    rows = {name: _rows(name, period) for name in TABLES}
    context.update(
        period=period,
        start=f"{period.start:%Y-%m-%d}",
        end=f"{period.end:%Y-%m-%d}",
        total=selectors.usage_total(period=period),
        charts=_charts(rows["days"], rows["models"]),
        tables=[
            {
                "name": name,
                "title": table.title,
                "headers": table.headers,
                "rows": table.cells(rows[name]),
                "csv_url": reverse("billing-export", args=[name]) + query,
            }
            for name, table in TABLES.items()
        ],
    )
    return TemplateResponse(request, "admin/billing/console.html", context)


@_staff_view
def export(request: HttpRequest, table: str) -> HttpResponse:
    """One table as CSV (``billing-<table>-<start>-<end>.csv``); 400 with the reason for
    a bad range, 404 for an unknown table."""
    if table not in TABLES:
        raise Http404(f"No table {table!r}.")
    try:
        period = _period(request)
    except InvalidInput as exc:
        return HttpResponse(
            exc.message, status=400, content_type="text/plain; charset=utf-8"
        )
    spec = TABLES[table]
    response = HttpResponse(content_type="text/csv; charset=utf-8")
    filename = f"billing-{table}-{period.start:%Y%m%d}-{period.end:%Y%m%d}.csv"
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    writer = csv.writer(response)
    writer.writerow(spec.headers)
    writer.writerows(spec.cells(_rows(table, period)))
    return response
