"""Seed one policy per category with the shipped defaults (admin can change them).

Every category blocks at the classifier's own threshold, except prompt injection,
which is flag-only: a jailbreak attempt cannot switch the assistant's rules off (the
system prompt and the model's own training still apply), and the rules that detect it
also match people asking *about* prompt injection ("what does 'ignore previous
instructions' do?"), so blocking would refuse legitimate security questions. Flagged
attempts are recorded for review. The values are written out here (not read from
safety.selectors.SHIPPED_POLICIES, which holds the same defaults for a category
without a row) so the migration stays what it was when later code changes.
"""

from django.db import migrations

DEFAULTS = {
    "violence": "block",
    "self_harm": "block",
    "sexual_minors": "block",
    "hate": "block",
    "harassment": "block",
    "weapons": "block",
    "illegal_drugs": "block",
    "malware": "block",
    "fraud": "block",
    "prompt_injection": "flag",
}


def seed(apps, schema_editor):
    CategoryPolicy = apps.get_model("safety", "CategoryPolicy")
    for category, action in DEFAULTS.items():
        CategoryPolicy.objects.get_or_create(
            category=category, defaults={"action": action, "threshold": None}
        )


def unseed(apps, schema_editor):
    apps.get_model("safety", "CategoryPolicy").objects.filter(
        category__in=list(DEFAULTS)
    ).delete()


class Migration(migrations.Migration):
    dependencies = [("safety", "0001_initial")]

    operations = [migrations.RunPython(seed, unseed)]
