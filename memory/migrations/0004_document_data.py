"""A document keeps its uploaded bytes until the ingest task extracts the text."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("memory", "0003_chunk_moderation_flags"),
    ]

    operations = [
        migrations.AddField(
            model_name="document",
            name="data",
            field=models.BinaryField(blank=True, default=b"", editable=False),
        ),
    ]
