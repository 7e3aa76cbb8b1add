"""Evaluation's models, moved from the gateway app without touching the database.

The tables stay where gateway/migrations/0007_evaluation.py created them (each model
names its table in ``Meta.db_table``), so this migration changes Django's state only;
gateway/migrations/0009_evaluation_moved.py removes the models from the gateway's state.
"""

import django.db.models.deletion
import django.utils.timezone
from decimal import Decimal
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ('gateway', '0008_userpreference_default_model'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[],
            state_operations=[
                migrations.CreateModel(
                    name='EvalSet',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('name', models.SlugField(max_length=100, unique=True)),
                        ('description', models.TextField(blank=True, default='')),
                        ('created_at', models.DateTimeField(default=django.utils.timezone.now)),
                    ],
                    options={
                        'db_table': 'gateway_evalset',
                        'ordering': ['name'],
                    },
                ),
                migrations.CreateModel(
                    name='EvalRun',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('pool', models.CharField(max_length=100)),
                        ('status', models.CharField(choices=[('pending', 'Pending'), ('running', 'Running'), ('complete', 'Complete'), ('failed', 'Failed')], default='pending', max_length=16)),
                        ('repeat', models.PositiveIntegerField(default=1)),
                        ('total', models.PositiveIntegerField(default=0)),
                        ('done', models.PositiveIntegerField(default=0)),
                        ('created_at', models.DateTimeField(default=django.utils.timezone.now)),
                        ('started_at', models.DateTimeField(blank=True, null=True)),
                        ('finished_at', models.DateTimeField(blank=True, null=True)),
                        ('error', models.TextField(blank=True, default='')),
                        ('created_by', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL)),
                        ('eval_set', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='runs', to='evaluation.evalset')),
                    ],
                    options={
                        'db_table': 'gateway_evalrun',
                        'ordering': ['-created_at'],
                    },
                ),
                migrations.CreateModel(
                    name='EvalCase',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('name', models.CharField(max_length=100)),
                        ('ordinal', models.PositiveIntegerField(default=0)),
                        ('category', models.CharField(blank=True, default='', max_length=50)),
                        ('messages', models.JSONField()),
                        ('system_prompt', models.TextField(blank=True, default='')),
                        ('checks', models.JSONField(default=list)),
                        ('params', models.JSONField(blank=True, default=dict)),
                        ('judge_pool', models.CharField(blank=True, default='', max_length=100)),
                        ('rubric', models.TextField(blank=True, default='')),
                        ('eval_set', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='cases', to='evaluation.evalset')),
                    ],
                    options={
                        'db_table': 'gateway_evalcase',
                        'ordering': ['eval_set', 'ordinal', 'id'],
                    },
                ),
                migrations.CreateModel(
                    name='EvalResult',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('repeat_index', models.PositiveIntegerField(default=0)),
                        ('output', models.TextField(blank=True, default='')),
                        ('finish_reason', models.CharField(blank=True, default='', max_length=32)),
                        ('check_results', models.JSONField(default=list)),
                        ('passed', models.BooleanField(default=False)),
                        ('error', models.TextField(blank=True, default='')),
                        ('pool', models.CharField(blank=True, default='', max_length=100)),
                        ('model', models.CharField(blank=True, default='', max_length=200)),
                        ('latency_ms', models.PositiveIntegerField(blank=True, null=True)),
                        ('ttft_ms', models.PositiveIntegerField(blank=True, null=True)),
                        ('prompt_tokens', models.PositiveIntegerField(default=0)),
                        ('completion_tokens', models.PositiveIntegerField(default=0)),
                        ('cost', models.DecimalField(decimal_places=6, default=Decimal('0'), max_digits=14)),
                        ('attempts', models.PositiveIntegerField(default=1)),
                        ('started_at', models.DateTimeField(blank=True, null=True)),
                        ('finished_at', models.DateTimeField(blank=True, null=True)),
                        ('case', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='results', to='evaluation.evalcase')),
                        ('run', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='results', to='evaluation.evalrun')),
                    ],
                    options={
                        'db_table': 'gateway_evalresult',
                        'ordering': ['run', 'case__ordinal', 'case_id', 'repeat_index'],
                        'constraints': [models.UniqueConstraint(fields=('run', 'case', 'repeat_index'), name='eval_result_one_per_run')],
                    },
                ),
                migrations.AddConstraint(
                    model_name='evalcase',
                    constraint=models.UniqueConstraint(fields=('eval_set', 'name'), name='eval_case_unique_name'),
                ),
            ],
        ),
    ]
