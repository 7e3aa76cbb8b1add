# Issue 11: a conversation's document scope (all / none / chosen documents).

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("conversations", "0006_search"),
        ("memory", "0003_chunk_moderation_flags"),
    ]

    operations = [
        migrations.AddField(
            model_name="conversation",
            name="doc_scope",
            field=models.CharField(
                choices=[("all", "All"), ("none", "None"), ("some", "Chosen")],
                default="all",
                max_length=8,
            ),
        ),
        migrations.AddField(
            model_name="conversation",
            name="scope_documents",
            field=models.ManyToManyField(
                blank=True, related_name="+", to="memory.document"
            ),
        ),
    ]
