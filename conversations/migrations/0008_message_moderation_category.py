# An imported message flagged by input moderation: kept, never sent in a prompt.

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("conversations", "0007_document_scope"),
    ]

    operations = [
        migrations.AddField(
            model_name="message",
            name="moderation_category",
            field=models.CharField(blank=True, default="", max_length=32),
        ),
    ]
