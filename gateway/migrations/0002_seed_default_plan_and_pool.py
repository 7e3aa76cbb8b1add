"""Seed the free plan (default) and the `default` pool on the embedded SmolLM2 model.

The pool name is the one the inference workers serve today (INFERENCE_DEFAULT_POOL's
default); the model name is what the llama.cpp engine reports for the bundled GGUF.
"""

from django.db import migrations

FREE_PLAN = {
    "name": "free",
    "tokens_per_minute": 20_000,
    "tokens_per_day": 200_000,
    "monthly_token_budget": 2_000_000,
    "priority": 0,
    "is_default": True,
}
DEFAULT_POOL = {
    "name": "default",
    "engine": "llamacpp",
    "model": "SmolLM2-135M-Instruct.Q4_1",
    "max_context": 4096,
    "max_output_tokens": 1024,
    "queue_threshold": 32,
}


def seed(apps, schema_editor):
    Plan = apps.get_model("gateway", "Plan")
    ModelPool = apps.get_model("gateway", "ModelPool")
    pool, _ = ModelPool.objects.get_or_create(
        name=DEFAULT_POOL["name"], defaults=DEFAULT_POOL
    )
    plan = Plan.objects.filter(is_default=True).first()
    if plan is None:
        plan, _ = Plan.objects.get_or_create(name=FREE_PLAN["name"], defaults=FREE_PLAN)
    plan.allowed_pools.add(pool)


def unseed(apps, schema_editor):
    apps.get_model("gateway", "Plan").objects.filter(name=FREE_PLAN["name"]).delete()
    apps.get_model("gateway", "ModelPool").objects.filter(
        name=DEFAULT_POOL["name"]
    ).delete()


class Migration(migrations.Migration):
    dependencies = [("gateway", "0001_initial")]

    operations = [migrations.RunPython(seed, unseed)]
