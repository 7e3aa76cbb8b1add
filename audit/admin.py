"""Admin of the audit log: :class:`AuditedAdminMixin`, which any app's ModelAdmin mixes
in to have its adds, changes and deletes logged, and the log itself, read-only for
everyone (superusers included).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from django.contrib import admin
from django.db import models, transaction
from django.db.models import QuerySet
from django.forms import ModelForm
from django.http import HttpRequest

from audit.models import AuditLogEntry
from audit.services import audit_record, audit_snapshot, redacted_changes
from chatsite.auth import request_user

_M = TypeVar("_M", bound=models.Model)

if TYPE_CHECKING:
    # To the type checker the mixin is the ModelAdmin it is mixed into, so that its
    # super() calls are checked; at run time it is a plain generic class.
    _AdminBase = admin.ModelAdmin
else:
    _AdminBase = Generic


class AuditedAdminMixin(_AdminBase[_M]):
    """Mix into a ModelAdmin (before ``admin.ModelAdmin``): every add, change (form or
    list_editable, many-to-many included) and delete (one or "delete selected") is
    appended to the audit log with the values before and after."""

    def save_model(
        self, request: HttpRequest, obj: _M, form: ModelForm[_M], change: bool
    ) -> None:
        stored = (
            type(obj)._default_manager.filter(pk=obj.pk).first()
            if change and obj.pk is not None
            else None
        )
        obj._audit_before = (stored, audit_snapshot(stored))  # type: ignore[attr-defined]  # for save_related
        super().save_model(request, obj, form, change)

    def save_related(
        self, request: HttpRequest, form: ModelForm[_M], formsets: Any, change: bool
    ) -> None:
        super().save_related(request, form, formsets, change)
        obj = form.instance
        stored, before = getattr(obj, "_audit_before", (None, None))
        after = audit_snapshot(obj)
        if after is not None and before is not None:
            after.update(redacted_changes(stored, obj))
        audit_record(
            actor=request_user(request),
            action=AuditLogEntry.Verb.CHANGE if change else AuditLogEntry.Verb.ADD,
            obj=obj,
            before=before,
            after=after,
        )

    def delete_model(self, request: HttpRequest, obj: _M) -> None:
        doomed = [(obj, audit_snapshot(obj), obj.pk)]
        with transaction.atomic():
            super().delete_model(request, obj)
            _deletions_record(request, doomed)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[_M]) -> None:
        doomed = [(obj, audit_snapshot(obj), obj.pk) for obj in queryset]
        with transaction.atomic():
            super().delete_queryset(request, queryset)
            _deletions_record(request, doomed)


def _deletions_record(
    request: HttpRequest,
    doomed: Sequence[tuple[models.Model, dict[str, Any] | None, Any]],
) -> None:
    """Log each deleted object of ``doomed`` (object, its snapshot before, its pk)."""
    for obj, before, pk in doomed:
        audit_record(
            actor=request_user(request),
            action=AuditLogEntry.Verb.DELETE,
            obj=obj,
            before=before,
            after=None,
            object_id=pk,
        )


@admin.register(AuditLogEntry)
class AuditLogEntryAdmin(admin.ModelAdmin):
    """Read-only for everyone, superusers included (append-only log)."""

    list_display = (
        "created_at",
        "actor_label",
        "action",
        "object_type",
        "object_id",
        "object_repr",
    )
    list_filter = ("action", "object_type", ("created_at", admin.DateFieldListFilter))
    search_fields = ("actor_label", "object_repr", "object_id")
    date_hierarchy = "created_at"
    readonly_fields = (
        "created_at",
        "actor",
        "actor_label",
        "action",
        "object_type",
        "object_id",
        "object_repr",
        "before",
        "after",
    )

    def get_actions(self, request: HttpRequest) -> dict:
        return {}

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False
