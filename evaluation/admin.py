"""Admin of evaluation: sets (create, import JSONL, start runs), runs (progress,
results, run again) and the side-by-side comparison of two runs.
"""

from __future__ import annotations

from typing import Any, cast

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse

from chatsite.auth import request_user
from chatsite.errors import DomainError
from evaluation import importing, selectors, tasks
from evaluation.models import EvalCase, EvalResult, EvalRun, EvalSet
from evaluation.runs import MAX_REPEAT, eval_run_create
from gateway import selectors as gateway_selectors
from gateway.models import ModelPool


class ImportForm(forms.Form):
    """Upload a JSONL file as a new set (or update an existing one's cases)."""

    name = forms.SlugField(max_length=100)
    description = forms.CharField(
        required=False, widget=forms.Textarea(attrs={"rows": 2})
    )
    file = forms.FileField(help_text="JSONL: one case per line.")
    replace = forms.BooleanField(
        required=False, help_text="Update the cases of an existing set by name."
    )


def _pool_choices() -> list[tuple[str, str]]:
    pools = gateway_selectors.gateway_config().pools_of(kind=ModelPool.Kind.CHAT)
    names = [p.name for p in pools if p.enabled] or [
        gateway_selectors.pool_default().name
    ]
    return [(n, n) for n in sorted(names)]


class StartRunForm(forms.Form):
    """The pool and repeat count of the runs an admin action starts."""

    pool = forms.ChoiceField(choices=())
    repeat = forms.IntegerField(min_value=1, max_value=MAX_REPEAT, initial=1)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        cast(forms.ChoiceField, self.fields["pool"]).choices = _pool_choices()


class EvalCaseInline(admin.TabularInline):
    model = EvalCase
    extra = 0
    fields = ("ordinal", "name", "category", "system_prompt", "messages", "checks")
    show_change_link = True


@admin.register(EvalSet)
class EvalSetAdmin(admin.ModelAdmin):
    list_display = ("name", "description", "case_count", "created_at")
    search_fields = ("name", "description")
    inlines = [EvalCaseInline]
    actions = ["start_runs"]
    change_list_template = "admin/evaluation/evalset_change_list.html"

    @admin.display(description="cases")
    def case_count(self, obj: EvalSet) -> int:
        return obj.cases.count()

    def get_urls(self) -> list[Any]:
        view = path(
            "import/",
            self.admin_site.admin_view(self.import_view),
            name="evaluation_evalset_import",
        )
        return [view, *super().get_urls()]

    def import_view(self, request: HttpRequest) -> HttpResponse:
        """Upload a JSONL set; a bad file imports nothing and lists the bad lines."""
        form = ImportForm(request.POST or None, request.FILES or None)
        if request.method == "POST" and form.is_valid():
            try:
                raw = form.cleaned_data["file"].read().decode("utf-8")
                eval_set, count = importing.eval_set_import(
                    name=form.cleaned_data["name"],
                    lines=raw.splitlines(),
                    description=form.cleaned_data["description"],
                    replace=form.cleaned_data["replace"],
                )
            except UnicodeDecodeError:
                form.add_error("file", "The file is not UTF-8 text.")
            except DomainError as exc:
                form.add_error("file", exc.message)
            else:
                self.message_user(
                    request, f"Imported {count} case(s) into {eval_set.name}."
                )
                return HttpResponseRedirect(
                    reverse("admin:evaluation_evalset_change", args=[eval_set.pk])
                )
        context = {
            **self.admin_site.each_context(request),
            "title": "Import an eval set (JSONL)",
            "opts": self.model._meta,
            "form": form,
        }
        return TemplateResponse(request, "admin/evaluation/import.html", context)

    @admin.action(description="Start a run of the selected sets on a pool")
    def start_runs(self, request: HttpRequest, queryset: Any) -> HttpResponse | None:
        form = StartRunForm(request.POST if "pool" in request.POST else None)
        if form.is_valid():
            started = []
            for eval_set in queryset:
                try:
                    run = eval_run_create(
                        set_name=eval_set.name,
                        pool=form.cleaned_data["pool"],
                        repeat=form.cleaned_data["repeat"],
                        created_by=request_user(request),
                    )
                except DomainError as exc:
                    self.message_user(request, exc.message, messages.ERROR)
                    continue
                tasks.eval_run_enqueue(run=run)
                started.append(str(run.pk))
            if started:
                self.message_user(
                    request,
                    f"Started run(s) {', '.join(started)} on a Celery worker; "
                    "progress shows in the eval runs list.",
                )
            return None
        context = {
            **self.admin_site.each_context(request),
            "title": "Start evaluation runs",
            "opts": self.model._meta,
            "form": form,
            "queryset": queryset,
            "action": "start_runs",
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
        }
        return TemplateResponse(request, "admin/evaluation/start_runs.html", context)


class EvalResultInline(admin.TabularInline):
    model = EvalResult
    extra = 0
    fields = (
        "case",
        "repeat_index",
        "passed",
        "output",
        "check_results",
        "error",
        "latency_ms",
        "ttft_ms",
        "completion_tokens",
        "cost",
    )
    readonly_fields = fields
    can_delete = False

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(EvalRun)
class EvalRunAdmin(admin.ModelAdmin):
    list_display = (
        "id",
        "eval_set",
        "pool",
        "status",
        "progress",
        "pass_rate",
        "repeat",
        "created_at",
        "finished_at",
    )
    list_filter = ("status", "pool", "eval_set")
    readonly_fields = (
        "eval_set",
        "pool",
        "status",
        "repeat",
        "total",
        "done",
        "created_by",
        "created_at",
        "started_at",
        "finished_at",
        "error",
    )
    inlines = [EvalResultInline]
    actions = ["run_again", "compare"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # runs start from the eval sets' action (or run_eval)

    @admin.display(description="pass rate")
    def pass_rate(self, obj: EvalRun) -> str:
        results = obj.results.all()
        n = results.count()
        return f"{results.filter(passed=True).count() / n:.0%}" if n else "—"

    def get_urls(self) -> list[Any]:
        view = path(
            "compare/<int:a>/<int:b>/",
            self.admin_site.admin_view(self.compare_view),
            name="evaluation_evalrun_compare",
        )
        return [view, *super().get_urls()]

    def compare_view(self, request: HttpRequest, a: int, b: int) -> HttpResponse:
        """Two runs side by side: summaries and the cases whose outcome differs."""
        runs = {r.pk: r for r in EvalRun.objects.filter(pk__in=[a, b])}
        if a not in runs or b not in runs:
            self.message_user(request, "No such run.", messages.ERROR)
            return HttpResponseRedirect(reverse("admin:evaluation_evalrun_changelist"))
        if runs[a].eval_set_id != runs[b].eval_set_id:
            self.message_user(
                request,
                "These runs are of different sets; compare two runs of the same set.",
                messages.ERROR,
            )
            return HttpResponseRedirect(reverse("admin:evaluation_evalrun_changelist"))
        sa, sb, diffs = selectors.runs_compare(a=runs[a], b=runs[b])
        context = {
            **self.admin_site.each_context(request),
            "title": f"Run {a} vs run {b}",
            "opts": self.model._meta,
            "summaries": [sa, sb],
            "a": runs[a],
            "b": runs[b],
            "diffs": diffs,
        }
        return TemplateResponse(request, "admin/evaluation/compare.html", context)

    @admin.action(description="Compare the two selected runs side by side")
    def compare(self, request: HttpRequest, queryset: Any) -> HttpResponse | None:
        ids = sorted(queryset.values_list("pk", flat=True))
        if len(ids) != 2:
            self.message_user(request, "Select exactly two runs.", messages.ERROR)
            return None
        return HttpResponseRedirect(
            reverse("admin:evaluation_evalrun_compare", args=ids)
        )

    @admin.action(description="Run the selected runs' set and pool again")
    def run_again(self, request: HttpRequest, queryset: Any) -> None:
        for old in queryset.select_related("eval_set"):
            try:
                run = eval_run_create(
                    set_name=old.eval_set.name,
                    pool=old.pool,
                    repeat=old.repeat,
                    created_by=request_user(request),
                )
            except DomainError as exc:
                self.message_user(request, exc.message, messages.ERROR)
                continue
            tasks.eval_run_enqueue(run=run)
            self.message_user(request, f"Started run {run.pk}.")
