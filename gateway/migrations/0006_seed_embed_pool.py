"""Seed the `embed` pool (all-MiniLM-L6-v2, 384-d) and let the default plan use it.

The pool name is EMBEDDING_POOL's default, the pool the embedding workers serve
(``run_inference_worker --engine sentence-transformers``); the model name is the
bundled model's (what API users name and see); 384 is
``inference.embeddings.EMBEDDING_DIM`` (the dimension of the stored vectors, written
out here: a migration does not follow later code). The input price is a nominal
0.00002 per 1,000 tokens, so embedding requests show in the usage report with a cost.
"""

from decimal import Decimal

from django.db import migrations

EMBED_POOL = {
    "name": "embed",
    "kind": "embedding",
    "engine": "sentence-transformers",
    "model": "all-MiniLM-L6-v2",
    "dimensions": 384,
    # all-MiniLM-L6-v2 reads at most 256 word pieces per input; it writes nothing
    "max_context": 256,
    "max_output_tokens": 0,
    "price_input_per_1k": Decimal("0.00002"),
    "price_output_per_1k": Decimal("0"),
    "queue_threshold": 32,
}


def seed(apps, schema_editor):
    Plan = apps.get_model("gateway", "Plan")
    ModelPool = apps.get_model("gateway", "ModelPool")
    pool, _ = ModelPool.objects.get_or_create(
        name=EMBED_POOL["name"], defaults=EMBED_POOL
    )
    plan = Plan.objects.filter(is_default=True).first()
    if plan is not None:
        plan.allowed_pools.add(pool)


def unseed(apps, schema_editor):
    apps.get_model("gateway", "ModelPool").objects.filter(
        name=EMBED_POOL["name"], kind="embedding"
    ).delete()


class Migration(migrations.Migration):
    dependencies = [("gateway", "0005_modelpool_kind_dimensions")]

    operations = [migrations.RunPython(seed, unseed)]
