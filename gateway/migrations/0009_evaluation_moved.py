"""Remove the evaluation models from the gateway app's state; their tables stay, now
owned by the evaluation app (evaluation/migrations/0001_initial.py)."""

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('gateway', '0008_userpreference_default_model'),
        ('evaluation', '0001_initial'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[],
            state_operations=[
                migrations.DeleteModel(name='EvalResult'),
                migrations.DeleteModel(name='EvalCase'),
                migrations.DeleteModel(name='EvalRun'),
                migrations.DeleteModel(name='EvalSet'),
            ],
        ),
    ]
