"""Chunks screened at ingestion: ``flagged``, ``moderation_category``, ``moderation_score``."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("memory", "0002_documents_facts")]

    operations = [
        migrations.AddField(
            model_name="chunk",
            name="flagged",
            field=models.BooleanField(db_default=False, default=False),
        ),
        migrations.AddField(
            model_name="chunk",
            name="moderation_category",
            field=models.CharField(
                blank=True, db_default="", default="", max_length=32
            ),
        ),
        migrations.AddField(
            model_name="chunk",
            name="moderation_score",
            field=models.FloatField(blank=True, null=True),
        ),
        migrations.AddIndex(
            model_name="chunk",
            index=models.Index(
                condition=models.Q(("flagged", True)),
                fields=["document", "ord"],
                name="chunk_flagged",
            ),
        ),
    ]
