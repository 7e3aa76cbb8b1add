"""Audit: the append-only log of what staff did, from the admin or a management
command, to any app's objects (values before and after).

- :mod:`.models`: AuditLogEntry (append-only);
- :mod:`.services`: :func:`~.services.audit_record`, :func:`~.services.audit_snapshot`;
- :mod:`.admin`: :class:`~.admin.AuditedAdminMixin` for any ModelAdmin, and the log,
  read-only.

It imports no app of ours (only Django and :mod:`chatsite`), so every app may use it.
"""
