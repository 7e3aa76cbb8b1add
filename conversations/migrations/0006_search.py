"""Full-text search: generated ``search_vector`` columns on messages and conversations.

The columns are made by SQL (conversations/search_sql.py) because their text-search
configuration comes from the setting CHAT_SEARCH_CONFIG, which a generated column
fixes when it is created; Django's state gets the matching GeneratedField and indexes.
"""

import django.contrib.postgres.indexes
import django.contrib.postgres.search
from django.db import migrations, models

from conversations import search_sql


def columns_add(apps, schema_editor):
    config = search_sql.search_config(connection=schema_editor.connection)
    for statement in search_sql.columns_add_sql(config=config):
        schema_editor.execute(statement)


def columns_drop(apps, schema_editor):
    for statement in search_sql.columns_drop_sql():
        schema_editor.execute(statement)


def _vector(column):
    return models.GeneratedField(
        db_persist=True,
        expression=django.contrib.postgres.search.SearchVector(
            column, config="english"
        ),
        output_field=django.contrib.postgres.search.SearchVectorField(),
    )


class Migration(migrations.Migration):
    dependencies = [
        ("conversations", "0005_threads"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunPython(columns_add, columns_drop)],
            state_operations=[
                migrations.AddField(
                    model_name="conversation",
                    name="search_vector",
                    field=_vector("title"),
                ),
                migrations.AddField(
                    model_name="message",
                    name="search_vector",
                    field=_vector("content"),
                ),
                migrations.AddIndex(
                    model_name="conversation",
                    index=django.contrib.postgres.indexes.GinIndex(
                        fields=["search_vector"], name="conv_search_gin"
                    ),
                ),
                migrations.AddIndex(
                    model_name="message",
                    index=django.contrib.postgres.indexes.GinIndex(
                        fields=["search_vector"], name="msg_search_gin"
                    ),
                ),
            ],
        ),
    ]
