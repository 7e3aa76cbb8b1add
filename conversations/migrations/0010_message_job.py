from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("conversations", "0009_message_tool_steps"),
    ]

    operations = [
        migrations.AddField(
            model_name="message",
            name="job",
            field=models.UUIDField(blank=True, null=True, unique=True),
        ),
        migrations.AddField(
            model_name="message",
            name="job_enqueued_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
    ]
