"""Give the audit log's content type its new app label (safety -> audit), so the
permissions granted on it and the admin's history stay attached.

On a fresh database there is nothing to rename: Django creates the content types after
migrating. A label already taken (the type was created under audit) is left as it is.
"""

from django.db import migrations

MODELS = ("auditlogentry",)


def _relabel(apps, *, old: str, new: str) -> None:
    ContentType = apps.get_model("contenttypes", "ContentType")
    for model in MODELS:
        if ContentType.objects.filter(app_label=new, model=model).exists():
            continue
        ContentType.objects.filter(app_label=old, model=model).update(app_label=new)


def forward(apps, schema_editor) -> None:
    _relabel(apps, old="safety", new="audit")


def backward(apps, schema_editor) -> None:
    _relabel(apps, old="audit", new="safety")


class Migration(migrations.Migration):

    dependencies = [
        ('audit', '0001_initial'),
        ('contenttypes', '0002_remove_content_type_name'),
    ]

    operations = [migrations.RunPython(forward, backward)]
