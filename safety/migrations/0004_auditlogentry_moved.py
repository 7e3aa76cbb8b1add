"""Remove the audit log's model from safety's state; its table stays, now owned by
the audit app (audit/migrations/0001_initial.py)."""

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('safety', '0003_suspension_audit_log'),
        ('audit', '0001_initial'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[],
            state_operations=[migrations.DeleteModel(name='AuditLogEntry')],
        ),
    ]
