"""Give the evaluation models' content types their new app label (gateway ->
evaluation), so the permissions granted on them and the admin's history stay attached.

On a fresh database there is nothing to rename: Django creates the content types after
migrating. A label already taken (the type was created under evaluation) is left as it is.
"""

from django.db import migrations

MODELS = ("evalset", "evalcase", "evalrun", "evalresult")


def _relabel(apps, *, old: str, new: str) -> None:
    ContentType = apps.get_model("contenttypes", "ContentType")
    for model in MODELS:
        if ContentType.objects.filter(app_label=new, model=model).exists():
            continue
        ContentType.objects.filter(app_label=old, model=model).update(app_label=new)


def forward(apps, schema_editor) -> None:
    _relabel(apps, old="gateway", new="evaluation")


def backward(apps, schema_editor) -> None:
    _relabel(apps, old="evaluation", new="gateway")


class Migration(migrations.Migration):

    dependencies = [
        ('evaluation', '0001_initial'),
        ('contenttypes', '0002_remove_content_type_name'),
    ]

    operations = [migrations.RunPython(forward, backward)]
