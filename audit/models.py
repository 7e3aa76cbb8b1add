"""The audit log: what staff did, from the admin or a management command, to which
object, with its values before and after.

The table is named ``safety_auditlogentry`` (``Meta.db_table``): it was created by
safety/migrations/0003_suspension_audit_log.py and is used as it is
(audit/migrations/0001_initial.py changes Django's state only).
"""

from __future__ import annotations

from django.conf import settings
from django.db import models


class AuditLogEntry(models.Model):
    """One staff action (admin or management command): who did what to which object,
    with the object's field values before and after (JSON; secrets redacted).

    Append-only: :meth:`save` refuses to update a stored entry and :meth:`delete`
    refuses to delete one; the admin shows entries read-only.
    """

    class Verb(models.TextChoices):
        ADD = "add", "Add"
        CHANGE = "change", "Change"
        DELETE = "delete", "Delete"
        CONFIRM = "confirm", "Confirm event"
        DISMISS = "dismiss", "Dismiss event"
        SUSPEND = "suspend", "Suspend user"
        LIFT = "lift", "Lift suspension"

    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
    )
    actor_label = models.CharField(max_length=150)
    action = models.CharField(max_length=16, choices=Verb.choices)
    object_type = models.CharField(max_length=100)
    object_id = models.CharField(max_length=64)
    object_repr = models.CharField(max_length=200)
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        db_table = "safety_auditlogentry"
        verbose_name_plural = "audit log entries"
        indexes = [
            models.Index(fields=["-created_at"], name="audit_created"),
            models.Index(fields=["object_type", "object_id"], name="audit_object"),
        ]

    def __str__(self) -> str:
        return f"{self.actor_label} {self.action} {self.object_type} {self.object_repr}"

    def save(self, *args: object, **kwargs: object) -> None:
        """Insert the entry; an entry once stored is never changed."""
        if self.pk is not None:
            raise ValueError("Audit log entries are append-only.")
        super().save(*args, **kwargs)

    def delete(self, *args: object, **kwargs: object) -> tuple[int, dict[str, int]]:
        """Refuse: audit log entries are append-only."""
        raise ValueError("Audit log entries are append-only.")
