"""Embeddings through the gateway (gateway/embeddings.py): routing, reservation,
settlement once, 503s that leave nothing reserved; the seeded pool and the system check
on its dimension (gateway/checks.py). Real PostgreSQL, Redis and embedding worker."""

from __future__ import annotations

import asyncio
import importlib
from decimal import Decimal

import pytest
from asgiref.sync import sync_to_async
from django.apps import apps
from django.conf import settings
from django.core import checks as django_checks

from chatsite.errors import QuotaExceeded, ServiceUnavailable
from gateway import embeddings, quota, selectors
from gateway.checks import embedding_pool_dimensions_check
from gateway.models import ModelPool, Plan, UsageRecord
from inference import embeddings as inference_embeddings
from inference import keys
from inference.embeddings import EMBEDDING_DIM
from tests.conftest import fake_heartbeat
from tests.conversations.openai.helpers import no_reservations
from tests.gateway import factories

TEXTS = ["The cat sat on the mat.", "Quarterly revenue grew by ten percent."]


def _used_today(user) -> int:
    limits = selectors.plan_limits(plan=selectors.plan_for_user(user=user))
    return quota.quota_windows(user_id=user.pk, limits=limits)[1].used


@pytest.mark.django_db
def test_the_estimate_counts_characters_and_is_capped_at_the_models_window(settings):
    settings.GATEWAY_CHARS_PER_TOKEN = 3.0
    assert embeddings.embedding_tokens_estimate(
        texts=["abcdef", "a"], max_tokens_per_input=256
    ) == (2 + 2) + (2 + 1)
    assert (
        embeddings.embedding_tokens_estimate(
            texts=["x" * 10_000], max_tokens_per_input=256
        )
        == 256
    )


@pytest.mark.django_db(transaction=True)
async def test_an_embedding_is_reserved_then_settled_once_to_the_tokens_read(
    user, embedding_worker
):
    await sync_to_async(factories.embedding_pool)()
    admission = await sync_to_async(embeddings.embedding_admit)(
        user=user, texts=TEXTS, model="all-MiniLM-L6-v2"
    )
    assert admission.pool == settings.EMBEDDING_POOL
    assert admission.dimensions == EMBEDDING_DIM
    assert await sync_to_async(_used_today)(user) == admission.reserved_tokens

    result = await embeddings.embedding_create(admission=admission, texts=TEXTS)

    assert len(result.vectors) == 2
    assert all(len(v) == EMBEDDING_DIM for v in result.vectors)
    record = await UsageRecord.objects.aget(job_id=admission.job_id)
    assert (record.prompt_tokens, record.completion_tokens) == (result.tokens, 0)
    assert record.status == UsageRecord.Status.COMPLETE
    assert record.pool == settings.EMBEDDING_POOL
    assert record.model == "all-MiniLM-L6-v2"
    assert record.cost == (Decimal("0.02") * result.tokens / 1000).quantize(
        Decimal("0.000001")
    )
    assert await sync_to_async(_used_today)(user) == result.tokens
    assert no_reservations()
    # settling again changes nothing
    assert (
        await sync_to_async(embeddings.embedding_settle)(
            admission=admission, result=result
        )
        is None
    )
    assert await sync_to_async(_used_today)(user) == result.tokens


@pytest.mark.django_db
def test_no_live_worker_is_a_503_before_anything_is_reserved(user):
    factories.embedding_pool()
    with pytest.raises(ServiceUnavailable) as exc:
        embeddings.embedding_admit(user=user, texts=TEXTS, model="all-MiniLM-L6-v2")
    assert exc.value.code == inference_embeddings.NO_WORKER
    assert exc.value.retryable
    assert exc.value.headers["Retry-After"]
    assert no_reservations()
    assert _used_today(user) == 0


@pytest.mark.django_db(transaction=True)
async def test_a_worker_that_never_answers_is_a_503_and_the_reservation_is_given_back(
    user, settings
):
    settings.API_EMBEDDING_TIMEOUT_S = 0.5
    await sync_to_async(factories.embedding_pool)()
    fake_heartbeat(settings.EMBEDDING_POOL)  # looks live, takes nothing
    admission = await sync_to_async(embeddings.embedding_admit)(
        user=user, texts=TEXTS, model=settings.EMBEDDING_POOL
    )
    assert not no_reservations()
    with pytest.raises(ServiceUnavailable) as exc:
        await embeddings.embedding_create(admission=admission, texts=TEXTS)
    assert exc.value.code == inference_embeddings.TIMEOUT
    assert "0.5 s" in exc.value.message
    assert no_reservations()
    assert await sync_to_async(_used_today)(user) == 0
    assert not await UsageRecord.objects.filter(user=user).aexists()


@pytest.mark.django_db(transaction=True)
async def test_a_cancelled_request_gives_its_reservation_back(user, settings):
    await sync_to_async(factories.embedding_pool)()
    fake_heartbeat(settings.EMBEDDING_POOL)
    admission = await sync_to_async(embeddings.embedding_admit)(
        user=user, texts=TEXTS, model=settings.EMBEDDING_POOL
    )
    task = asyncio.ensure_future(
        embeddings.embedding_create(admission=admission, texts=TEXTS)
    )
    # wait until the job is on the queue: the request is waiting for its vectors
    from inference.connections import redis_async

    client = redis_async()
    async with asyncio.timeout(10):
        while not await client.xlen(keys.queue_key(settings.EMBEDDING_POOL)):
            await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert no_reservations()
    assert await sync_to_async(_used_today)(user) == 0


@pytest.mark.django_db
def test_over_quota_is_a_429_and_nothing_is_reserved(user):
    factories.embedding_pool()
    fake_heartbeat(settings.EMBEDDING_POOL)
    factories.subscribe(user, factories.plan(tokens_per_minute=5))
    with pytest.raises(QuotaExceeded):
        embeddings.embedding_admit(user=user, texts=TEXTS, model="all-MiniLM-L6-v2")
    assert no_reservations()


@pytest.mark.django_db
def test_dimensions_other_than_the_pools_are_refused(user):
    factories.embedding_pool()
    fake_heartbeat(settings.EMBEDDING_POOL)
    with pytest.raises(embeddings.DimensionsUnsupported) as exc:
        embeddings.embedding_admit(
            user=user, texts=TEXTS, model="all-MiniLM-L6-v2", dimensions=256
        )
    assert exc.value.status == 400
    assert exc.value.param == "dimensions"
    assert "384" in exc.value.message
    assert no_reservations()
    admission = embeddings.embedding_admit(
        user=user, texts=TEXTS, model="all-MiniLM-L6-v2", dimensions=EMBEDDING_DIM
    )
    embeddings.embedding_release(admission=admission)
    assert no_reservations()


@pytest.mark.django_db
def test_the_system_check_errors_on_an_embedding_pool_of_another_dimension():
    factories.embedding_pool("ok-pool")
    factories.embedding_pool("undeclared", dimensions=None)
    factories.embedding_pool("off", dimensions=768, enabled=False)
    factories.pool("chat-pool", dimensions=768)  # a chat pool's dimensions mean nothing
    assert embedding_pool_dimensions_check(databases=["default"]) == []

    factories.embedding_pool("wide", model="bge-base", dimensions=768)
    errors = embedding_pool_dimensions_check(databases=["default"])
    assert [e.id for e in errors] == ["gateway.E001"]
    assert errors[0].level == django_checks.ERROR
    assert "'wide'" in errors[0].msg and "768-d" in errors[0].msg
    assert "384-d" in errors[0].msg
    # registered: Django runs it wherever it checks the database (migrate, check)
    found = django_checks.run_checks(
        tags=[django_checks.Tags.database], databases=["default"]
    )
    assert "gateway.E001" in [e.id for e in found]
    # and not where no database is named
    assert embedding_pool_dimensions_check(databases=None) == []


@pytest.mark.django_db
def test_the_migration_seeds_the_embed_pool_on_the_default_plan():
    migration = importlib.import_module("gateway.migrations.0006_seed_embed_pool")
    ModelPool.objects.filter(name="embed").delete()
    Plan.objects.filter(is_default=True).delete()
    free = factories.plan("free-seeded", is_default=True)
    migration.seed(apps, None)
    migration.seed(apps, None)  # idempotent
    pool = ModelPool.objects.get(name="embed")
    assert pool.name == settings.EMBEDDING_POOL  # the pool the embedding workers serve
    assert pool.kind == ModelPool.Kind.EMBEDDING
    assert pool.engine == ModelPool.Engine.SENTENCE_TRANSFORMERS
    assert (pool.model, pool.dimensions) == ("all-MiniLM-L6-v2", EMBEDDING_DIM)
    assert pool in free.allowed_pools.all()
    assert embedding_pool_dimensions_check(databases=["default"]) == []
