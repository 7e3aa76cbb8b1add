"""Pools get a kind (chat | embedding) and embedding pools a vector dimension.

Schema only: the `embed` pool is seeded by 0006 (PostgreSQL refuses to alter a table in
the transaction that changed its rows, so data and schema go in separate migrations).
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("gateway", "0004_userpreference")]

    operations = [
        migrations.AddField(
            model_name="modelpool",
            name="dimensions",
            field=models.PositiveIntegerField(
                blank=True,
                help_text="Embedding pools: the dimension of the vectors the model "
                "makes (must be 384, the stored vectors' dimension).",
                null=True,
            ),
        ),
        migrations.AddField(
            model_name="modelpool",
            name="kind",
            field=models.CharField(
                choices=[("chat", "Chat"), ("embedding", "Embedding")],
                default="chat",
                help_text="Chat pools answer chat completions; embedding pools serve "
                "vectors.",
                max_length=16,
            ),
        ),
        migrations.AlterField(
            model_name="modelpool",
            name="engine",
            field=models.CharField(
                choices=[
                    ("llamacpp", "Llamacpp"),
                    ("vllm", "Vllm"),
                    ("openai", "Openai"),
                    ("scripted", "Scripted"),
                    ("sentence-transformers", "Sentence Transformers"),
                ],
                default="llamacpp",
                max_length=32,
            ),
        ),
    ]
