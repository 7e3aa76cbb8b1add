"""Migrations: the models and the migrations agree, and the models that moved apps
(evaluation's from gateway, the audit log from safety) keep their tables, rows,
content types and the permissions granted on them when a database made before the
move migrates forward."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group
from django.contrib.contenttypes.models import ContentType
from django.core.management import call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from audit.models import AuditLogEntry
from evaluation.models import EvalSet

# The leaf migrations of a database made before the move, and the apps it lacked.
BEFORE_MOVE = [
    ("gateway", "0008_userpreference_default_model"),
    ("safety", "0003_suspension_audit_log"),
    ("evaluation", None),
    ("audit", None),
]
MOVED = {
    ("gateway", "evaluation"): ("evalset", "evalcase", "evalrun", "evalresult"),
    ("safety", "audit"): ("auditlogentry",),
}

pytestmark = pytest.mark.django_db


def test_the_models_need_no_new_migration():
    call_command("makemigrations", "--check", "--dry-run", verbosity=0)


def test_a_database_made_before_the_move_keeps_its_rows_and_permissions():
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE_MOVE)
    old = executor.loader.project_state(BEFORE_MOVE[:2]).apps
    eval_set = old.get_model("gateway", "EvalSet").objects.create(name="kept")
    old.get_model("gateway", "EvalCase").objects.create(
        eval_set=eval_set, name="c1", messages=[{"role": "user", "content": "hi"}]
    )
    old.get_model("safety", "AuditLogEntry").objects.create(
        actor_label="command", action="add", object_type="gateway.plan", object_id="1"
    )
    # the content types as the old code had them, one permission granted on each app
    for (before, after), models in MOVED.items():
        ContentType.objects.filter(app_label=after, model__in=models).update(
            app_label=before
        )
    group = Group.objects.create(name="evaluators")
    group.permissions.add(
        *ContentType.objects.get(
            app_label="gateway", model="evalset"
        ).permission_set.all(),
        *ContentType.objects.get(
            app_label="safety", model="auditlogentry"
        ).permission_set.all(),
    )
    granted = group.permissions.count()

    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())
    ContentType.objects.clear_cache()

    assert EvalSet.objects.get(name="kept").cases.get().name == "c1"
    assert AuditLogEntry.objects.get().object_type == "gateway.plan"
    for (before, after), models in MOVED.items():
        assert not ContentType.objects.filter(app_label=before, model__in=models)
        assert ContentType.objects.filter(
            app_label=after, model__in=models
        ).count() == (len(models))
    labels = set(group.permissions.values_list("content_type__app_label", flat=True))
    assert labels == {"evaluation", "audit"}
    assert group.permissions.count() == granted
