"""The append-only audit log (issue 10, the moderation console): what staff did, from
the admin or a management command, with the object's values before and after.

:func:`audit_record` writes one entry; :class:`AuditedAdminMixin` records every add,
change and delete a ModelAdmin makes (the form, list_editable, "delete selected").
Services that staff call (suspend, lift, review an event) record their own entries,
so the admin and the commands are audited alike.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from django.contrib import admin
from django.contrib.auth.models import User
from django.core.serializers.json import DjangoJSONEncoder
from django.db import models, transaction
from django.db.models import QuerySet
from django.forms import ModelForm
from django.http import HttpRequest

from chatsite.auth import request_user
from safety.models import AuditLogEntry

# Field values never written to the log, only whether they changed.
REDACTED_FIELDS = frozenset({"password"})
REDACTED = "<redacted>"


def _json_safe(value: Any) -> Any:
    return json.loads(json.dumps(value, cls=DjangoJSONEncoder, default=str))


def audit_snapshot(obj: models.Model | None) -> dict[str, Any] | None:
    """The object's field values as JSON: concrete fields by ``attname`` (a foreign
    key as its id), many-to-many fields as sorted id lists; secrets redacted."""
    if obj is None:
        return None
    values: dict[str, Any] = {}
    for field in obj._meta.concrete_fields:
        values[field.attname] = getattr(obj, field.attname)
    if obj.pk is not None:
        for field in obj._meta.many_to_many:
            values[field.name] = sorted(
                getattr(obj, field.name).values_list("pk", flat=True)
            )
    for name in REDACTED_FIELDS & values.keys():
        values[name] = REDACTED
    return _json_safe(values)


def _redacted_changes(
    before: models.Model | None, after: models.Model | None
) -> dict[str, str]:
    """For redacted fields that changed, a marker (the values stay out of the log)."""
    changed = {}
    for name in REDACTED_FIELDS:
        old = getattr(before, name, None)
        new = getattr(after, name, None)
        if before is not None and after is not None and old != new:
            changed[name] = f"{REDACTED} (changed)"
    return changed


def actor_label_for(user: User | None) -> str:
    """How an actor is named in the log (their username; "system" for nobody)."""
    return user.get_username() if user is not None else "system"


def audit_record(
    *,
    actor: User | None,
    action: str,
    obj: models.Model,
    before: dict[str, Any] | None,
    after: dict[str, Any] | None,
    actor_label: str | None = None,
    object_id: Any = None,
) -> AuditLogEntry:
    """Append one entry: ``actor`` (None: a command or the system, named by
    ``actor_label``) did ``action`` (an :class:`AuditLogEntry.Verb`) to ``obj``,
    whose snapshots (:func:`audit_snapshot`) were ``before`` and ``after``.
    ``object_id``: the id when ``obj`` no longer has one (deleted)."""
    return AuditLogEntry.objects.create(
        actor=actor if actor is not None and actor.pk is not None else None,
        actor_label=actor_label or actor_label_for(actor),
        action=action,
        object_type=obj._meta.label_lower,
        object_id=str(object_id if object_id is not None else obj.pk),
        object_repr=str(obj)[:200],
        before=before,
        after=after,
    )


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
            after.update(_redacted_changes(stored, obj))
        audit_record(
            actor=request_user(request),
            action=AuditLogEntry.Verb.CHANGE if change else AuditLogEntry.Verb.ADD,
            obj=obj,
            before=before,
            after=after,
        )

    def delete_model(self, request: HttpRequest, obj: _M) -> None:
        before, pk = audit_snapshot(obj), obj.pk
        with transaction.atomic():
            super().delete_model(request, obj)
            audit_record(
                actor=request_user(request),
                action=AuditLogEntry.Verb.DELETE,
                obj=obj,
                before=before,
                after=None,
                object_id=pk,
            )

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[_M]) -> None:
        doomed = [(obj, audit_snapshot(obj), obj.pk) for obj in queryset]
        with transaction.atomic():
            super().delete_queryset(request, queryset)
            for obj, before, pk in doomed:
                audit_record(
                    actor=request_user(request),
                    action=AuditLogEntry.Verb.DELETE,
                    obj=obj,
                    before=before,
                    after=None,
                    object_id=pk,
                )
