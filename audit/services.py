"""Writes of the append-only audit log: what staff did, from the admin or a management
command, with the object's values before and after.

:func:`audit_record` writes one entry, :func:`audit_snapshot` gives an object's values
as the log stores them; :class:`audit.admin.AuditedAdminMixin` records every add,
change and delete a ModelAdmin makes. Services that staff call (suspend, lift, review
an event, create a plan) record their own entries, so the admin and the commands are
audited alike.
"""

from __future__ import annotations

import json
from typing import Any

from django.contrib.auth.models import User
from django.core.serializers.json import DjangoJSONEncoder
from django.db import models

from audit.models import AuditLogEntry

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


def redacted_changes(
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
