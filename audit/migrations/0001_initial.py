"""The audit log's model, moved from the safety app without touching the database.

The table stays where safety/migrations/0003_suspension_audit_log.py created it
(``Meta.db_table``), so this migration changes Django's state only;
safety/migrations/0004_auditlogentry_moved.py removes the model from safety's state.
"""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ('safety', '0003_suspension_audit_log'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[],
            state_operations=[
                migrations.CreateModel(
                    name='AuditLogEntry',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('actor_label', models.CharField(max_length=150)),
                        ('action', models.CharField(choices=[('add', 'Add'), ('change', 'Change'), ('delete', 'Delete'), ('confirm', 'Confirm event'), ('dismiss', 'Dismiss event'), ('suspend', 'Suspend user'), ('lift', 'Lift suspension')], max_length=16)),
                        ('object_type', models.CharField(max_length=100)),
                        ('object_id', models.CharField(max_length=64)),
                        ('object_repr', models.CharField(max_length=200)),
                        ('before', models.JSONField(blank=True, null=True)),
                        ('after', models.JSONField(blank=True, null=True)),
                        ('created_at', models.DateTimeField(auto_now_add=True)),
                        ('actor', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL)),
                    ],
                    options={
                        'db_table': 'safety_auditlogentry',
                        'verbose_name_plural': 'audit log entries',
                        'ordering': ['-created_at', '-id'],
                        'indexes': [models.Index(fields=['-created_at'], name='audit_created'), models.Index(fields=['object_type', 'object_id'], name='audit_object')],
                    },
                ),
            ],
        ),
    ]
