from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("gateway", "0009_evaluation_moved"),
    ]

    operations = [
        migrations.AddField(
            model_name="plan",
            name="requests_per_minute",
            field=models.PositiveIntegerField(
                blank=True,
                default=600,
                help_text="API requests per minute for the user, all keys (empty: no limit).",
                null=True,
            ),
        ),
        migrations.AddField(
            model_name="plan",
            name="key_requests_per_minute",
            field=models.PositiveIntegerField(
                blank=True,
                default=300,
                help_text="API requests per minute for each API key (empty: no limit).",
                null=True,
            ),
        ),
    ]
