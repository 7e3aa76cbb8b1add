# Only confident (or confirmed) blocks count toward the abuse score; appeals and the
# hard negatives of upheld ones; a suspension names the block that caused it.

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


def blocks_count(apps, schema_editor):
    """Blocks recorded before the field existed all counted: keep them counting."""
    event = apps.get_model("safety", "ModerationEvent")
    event.objects.filter(action="block", direction="input").update(abuse=True)


class Migration(migrations.Migration):

    dependencies = [
        ("safety", "0004_auditlogentry_moved"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name="moderationevent",
            name="abuse",
            field=models.BooleanField(
                default=False, help_text="Counts toward the user's abuse score."
            ),
        ),
        migrations.RunPython(blocks_count, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="moderationevent",
            name="surface",
            field=models.CharField(
                choices=[
                    ("chat", "Chat"),
                    ("api", "API"),
                    ("import", "Import"),
                    ("memory", "Memory"),
                ],
                max_length=8,
            ),
        ),
        migrations.AddField(
            model_name="suspension",
            name="cause",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="+",
                to="safety.moderationevent",
            ),
        ),
        migrations.CreateModel(
            name="Appeal",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True,
                        primary_key=True,
                        serialize=False,
                        verbose_name="ID",
                    ),
                ),
                ("comment", models.TextField(blank=True, default="")),
                (
                    "status",
                    models.CharField(
                        choices=[
                            ("open", "Open"),
                            ("upheld", "Upheld (false positive)"),
                            ("rejected", "Rejected"),
                        ],
                        default="open",
                        max_length=12,
                    ),
                ),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                ("decided_at", models.DateTimeField(blank=True, null=True)),
                (
                    "decided_by",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
                (
                    "event",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="appeal",
                        to="safety.moderationevent",
                    ),
                ),
                (
                    "user",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={
                "ordering": ["-created_at"],
                "indexes": [
                    models.Index(
                        fields=["status", "-created_at"], name="appeal_status"
                    )
                ],
            },
        ),
        migrations.CreateModel(
            name="HardNegative",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True,
                        primary_key=True,
                        serialize=False,
                        verbose_name="ID",
                    ),
                ),
                ("text", models.TextField()),
                (
                    "category",
                    models.CharField(
                        choices=[('violence', 'Violence'), ('self_harm', 'Self-harm'), ('sexual_minors', 'Sexual content involving minors'), ('hate', 'Hate'), ('harassment', 'Harassment'), ('weapons', 'Weapons'), ('illegal_drugs', 'Illegal drugs'), ('malware', 'Malware and cyberattacks'), ('fraud', 'Fraud and scams'), ('prompt_injection', 'Prompt injection / jailbreak')],
                        help_text="What it was flagged as.",
                        max_length=32,
                    ),
                ),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                (
                    "event",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to="safety.moderationevent",
                    ),
                ),
            ],
            options={"ordering": ["-created_at"]},
        ),
    ]
