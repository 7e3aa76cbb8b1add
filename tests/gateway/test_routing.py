"""Routing and admission (gateway/routing.py): explicit choice, plan tier, difficulty,
saturation and fallback, shedding the lowest-priority plan, against real Redis."""

from __future__ import annotations

import dataclasses
import time
from decimal import Decimal

import pytest

from chatsite.errors import Forbidden, NotFound, PoolSaturated
from conversations import services as chat
from gateway import routing
from gateway.models import ModelPool, Plan
from inference import keys, protocol
from inference.connections import redis_sync
from tests.conftest import fake_heartbeat, make_user
from tests.gateway import factories

pytestmark = pytest.mark.django_db

SIMPLE = [{"role": "system", "content": "sys"}, {"role": "user", "content": "hi!"}]
HARD = [
    {"role": "system", "content": "sys"},
    {"role": "user", "content": "Refactor this:\n```python\nprint(1)\n```"},
]


@pytest.fixture
def pools():
    ModelPool.objects.all().delete()
    small = factories.pool(
        "small", model="tiny-1", max_context=2048, price_output_per_1k=Decimal("0.1")
    )
    big = factories.pool(
        "big", model="large-1", max_context=32768, price_output_per_1k=Decimal("2")
    )
    return small, big


def queue_jobs(pool: str, n: int) -> None:
    for i in range(n):
        job = protocol.Job(job_id=f"{pool}-{i}", messages=[])
        redis_sync().xadd(keys.queue_key(pool), job.to_fields())


def test_difficulty_sends_simple_prompts_to_the_cheap_pool(pools):
    small, big = pools
    plan = factories.plan("pro", pools=[small, big])
    assert routing.pool_choose(plan=plan, messages=SIMPLE) == small
    assert routing.pool_choose(plan=plan, messages=HARD) == big
    long = [{"role": "user", "content": "word " * 100}]
    assert routing.pool_choose(plan=plan, messages=long) == big


def test_the_plan_tier_limits_the_pools(pools):
    small, big = pools
    free = factories.plan("free-tier", pools=[small])
    assert routing.pool_choose(plan=free, messages=HARD) == small


def test_explicit_model_choice_is_honoured_only_if_the_plan_allows_it(pools):
    small, big = pools
    free = factories.plan("free-tier", pools=[small])
    pro = factories.plan("pro", pools=[small, big])
    assert routing.pool_choose(plan=pro, messages=SIMPLE, requested="large-1") == big
    assert routing.pool_choose(plan=pro, messages=HARD, requested="small") == small
    with pytest.raises(Forbidden) as denied:
        routing.pool_choose(plan=free, messages=SIMPLE, requested="large-1")
    assert denied.value.status == 403 and "does not include" in denied.value.message
    with pytest.raises(NotFound):
        routing.pool_choose(plan=pro, messages=SIMPLE, requested="gpt-99")
    big.enabled = False
    big.save()
    with pytest.raises(NotFound):
        routing.pool_choose(plan=pro, messages=SIMPLE, requested="large-1")


def test_a_pool_without_a_live_worker_falls_back(pools):
    small, big = pools
    big.fallback = small
    big.save()
    plan = factories.plan("pro", pools=[small, big])
    fake_heartbeat("small")
    assert routing.pool_admit(pool=big, plan=plan) == small


def test_a_queue_deeper_than_the_threshold_falls_back(pools):
    small, big = pools
    big.fallback, big.queue_threshold = small, 3
    big.save()
    plan = factories.plan("pro", pools=[small, big])
    fake_heartbeat("small")
    fake_heartbeat("big")
    queue_jobs("big", 3)
    assert routing.queue_waiting(pool="big") == 3
    assert routing.pool_admit(pool=big, plan=plan) == big  # 3 waiting: not deeper
    queue_jobs("big", 1)
    assert routing.pool_admit(pool=big, plan=plan) == small


def test_jobs_taken_by_a_worker_no_longer_count_as_waiting(pools):
    queue_jobs("big", 4)
    client = redis_sync()
    client.xgroup_create(keys.queue_key("big"), protocol.GROUP, id="0")
    client.xreadgroup(protocol.GROUP, "w1", {keys.queue_key("big"): ">"}, count=3)
    assert routing.queue_waiting(pool="big") == 1


def test_all_saturated_is_a_503_with_retry_after(pools, settings):
    small, big = pools
    big.fallback = small
    big.save()
    small.fallback = big  # a cycle ends too
    small.save()
    plan = factories.plan("pro", pools=[small, big])
    with pytest.raises(PoolSaturated) as info:
        routing.pool_admit(pool=big, plan=plan)
    assert info.value.status == 503
    assert info.value.headers["Retry-After"] == str(
        settings.GATEWAY_SATURATED_RETRY_AFTER_S
    )
    assert "busy" in info.value.message


def test_under_pressure_the_lowest_priority_plan_is_shed_first(pools, settings):
    settings.GATEWAY_SHED_FRACTION = 0.5
    small, big = pools
    big.queue_threshold = 4
    big.save()
    Plan.objects.all().delete()
    free = factories.plan("free-tier", pools=[big], priority=0)
    paid = factories.plan("paid", pools=[big], priority=10)
    fake_heartbeat("big")
    queue_jobs("big", 3)  # over half the threshold, under the threshold
    assert routing.pool_admit(pool=big, plan=paid) == big
    with pytest.raises(PoolSaturated):
        routing.pool_admit(pool=big, plan=free)
    # with a single priority level nobody is shed early
    paid.delete()
    assert routing.pool_admit(pool=big, plan=free) == big


def test_the_turn_records_the_pool_that_was_chosen(
    pools, django_capture_on_commit_callbacks
):
    small, big = pools
    big.fallback = small
    big.save()
    user = make_user("router")
    factories.subscribe(user, factories.plan("pro", pools=[small, big]))
    fake_heartbeat("small")  # "big" has no worker: its requests fall back
    with django_capture_on_commit_callbacks(execute=True):
        turn = chat.turn_start(user=user, content="hi", model="large-1")
    assert turn.assistant_message.pool == "small"
    assert redis_sync().xlen(keys.queue_key("small")) == 1
    assert redis_sync().xlen(keys.queue_key("big")) == 0


def test_max_tokens_is_capped_at_the_pool_limit(
    pools, django_capture_on_commit_callbacks
):
    small, _big = pools
    small.max_output_tokens = 100
    small.save()
    user = make_user("capped")
    factories.subscribe(user, factories.plan("basic", pools=[small]))
    fake_heartbeat("small")
    with django_capture_on_commit_callbacks(execute=True):
        chat.turn_start(user=user, content="hi", params={"max_tokens": 5000})
    entry = redis_sync().xrange(keys.queue_key("small"))[0][1]
    assert protocol.Job.from_fields(entry).max_tokens == 100


def test_without_any_pool_in_the_database_the_default_pool_is_used(settings):
    ModelPool.objects.all().delete()
    plan = Plan(name="x")
    pool = routing.pool_choose(plan=plan, messages=SIMPLE)
    assert pool.name == settings.INFERENCE_DEFAULT_POOL and pool.pk is None


def test_the_chat_page_offers_the_plans_models_and_the_post_honours_the_choice(
    pools, client
):
    small, big = pools
    user = make_user("picker")
    factories.subscribe(user, factories.plan("pro", pools=[small, big]))
    fake_heartbeat("small")
    fake_heartbeat("big")
    client.force_login(user)
    page = client.get("/").content.decode()
    # each pool an option by its name, labelled with its model's display name
    assert 'name="model"' in page
    assert '<option value="big">large 1</option>' in page
    assert '<option value="small"' in page and ">tiny 1</option>" in page
    response = client.post("/c/messages/", {"content": "hi", "model": "big"})
    assert response.status_code == 201
    from conversations.models import Message

    answer = Message.objects.get(id=response.json()["assistant_message"]["id"])
    assert answer.pool == "big"  # a simple prompt, but the explicit choice wins
    other = make_user("cheap")
    factories.subscribe(other, factories.plan("basic", pools=[small]))
    client.force_login(other)
    assert 'name="model"' not in client.get("/").content.decode()
    denied = client.post("/c/messages/", {"content": "hi", "model": "big"})
    assert denied.status_code == 403
    assert "does not include" in denied.json()["error"]["message"]


def test_the_message_post_is_a_503_with_retry_after_when_no_pool_can_answer(
    pools, client, settings
):
    small, big = pools
    user = make_user("unlucky")
    factories.subscribe(user, factories.plan("pro", pools=[small, big]))
    client.force_login(user)  # no worker anywhere
    response = client.post("/c/messages/", {"content": "hi"})
    assert response.status_code == 503
    assert response["Retry-After"] == str(settings.GATEWAY_SATURATED_RETRY_AFTER_S)
    assert response.json()["error"]["code"] == "pool_saturated"
    from conversations.models import Message

    assert Message.objects.count() == 0


def test_the_config_snapshot_is_reused_until_its_ttl_expires(pools, settings):
    from gateway import selectors

    small, _big = pools
    settings.GATEWAY_CONFIG_CACHE_S = 60
    first = selectors.gateway_config()
    ModelPool.objects.filter(pk=small.pk).update(enabled=False)
    assert selectors.gateway_config() is first  # within the TTL: no reload
    assert first.pools["small"].enabled
    settings.GATEWAY_CONFIG_CACHE_S = 0
    assert not selectors.gateway_config().pools["small"].enabled


@pytest.mark.django_db(transaction=True)  # the reload runs on its own connection
def test_a_snapshot_past_half_its_ttl_is_served_and_reloaded_behind(pools, settings):
    from gateway import selectors

    small, _big = pools
    settings.GATEWAY_CONFIG_CACHE_S = 0
    loaded = selectors.gateway_config()
    settings.GATEWAY_CONFIG_CACHE_S = 60
    aged = dataclasses.replace(loaded, loaded_at=time.monotonic() - 31)
    selectors._config = aged
    ModelPool.objects.filter(pk=small.pk).update(enabled=False)
    assert selectors.gateway_config() is aged  # answered at once, not reloaded
    deadline = time.monotonic() + 10
    while selectors.gateway_config() is aged:
        assert time.monotonic() < deadline, "never reloaded"
        time.sleep(0.01)
    fresh = selectors.gateway_config()
    assert not fresh.pools["small"].enabled
    assert aged.loaded_at < fresh.loaded_at <= time.monotonic()


@pytest.fixture
def embed_pool(pools):
    """An embedding pool that would win every chat rule if chat routing saw it: the
    cheapest, with the largest window."""
    return factories.embedding_pool(
        "embed-test", model="vectors-1", max_context=1_000_000
    )


def test_chat_routing_never_picks_an_embedding_pool(pools, embed_pool):
    small, big = pools
    everything = factories.plan("all-pools")  # lists none: every enabled pool
    listed = factories.plan("listed", pools=[small, big, embed_pool])
    for plan in (everything, listed):
        assert routing.pool_choose(plan=plan, messages=SIMPLE) == small
        assert routing.pool_choose(plan=plan, messages=HARD) == big


def test_a_plan_of_only_an_embedding_pool_has_no_chat_model(pools, embed_pool):
    plan = factories.plan("vectors-only", pools=[embed_pool])
    with pytest.raises(Forbidden) as exc:
        routing.pool_choose(plan=plan, messages=SIMPLE)
    assert exc.value.code == "no_model_for_plan"


@pytest.mark.parametrize("requested", ["embed-test", "vectors-1"])
def test_a_chat_request_for_an_embedding_model_is_a_400_naming_the_endpoint(
    pools, embed_pool, requested
):
    plan = factories.plan("pro", pools=[*pools, embed_pool])
    with pytest.raises(routing.WrongModelKind) as exc:
        routing.pool_choose(plan=plan, messages=SIMPLE, requested=requested)
    assert exc.value.status == 400
    assert exc.value.param == "model"
    assert "embedding model" in exc.value.message
    assert "/v1/embeddings" in exc.value.message


def test_an_embeddings_request_for_a_chat_model_is_a_400_naming_the_endpoint(
    pools, embed_pool
):
    plan = factories.plan("pro", pools=[*pools, embed_pool])
    assert routing.embedding_pool_choose(plan=plan, requested="vectors-1") == embed_pool
    assert routing.embedding_pool_choose(plan=plan, requested="embed-test") == (
        embed_pool
    )
    with pytest.raises(routing.WrongModelKind) as exc:
        routing.embedding_pool_choose(plan=plan, requested="tiny-1")
    assert exc.value.param == "model"
    assert "chat model" in exc.value.message
    assert "/v1/chat/completions" in exc.value.message
    with pytest.raises(NotFound):
        routing.embedding_pool_choose(plan=plan, requested="nope")


def test_the_plan_decides_which_embedding_pools_a_user_may_use(pools, embed_pool):
    small, _big = pools
    chat_only = factories.plan("chat-only", pools=[small])
    with pytest.raises(Forbidden) as exc:
        routing.embedding_pool_choose(plan=chat_only, requested="embed-test")
    assert exc.value.code == "model_not_allowed"
    embed_pool.enabled = False
    embed_pool.save()
    with pytest.raises(NotFound):
        routing.embedding_pool_choose(plan=factories.plan(), requested="embed-test")


def test_a_fallback_chain_skips_an_embedding_pool(pools, embed_pool):
    small, _big = pools
    small.fallback = embed_pool
    small.save()
    fake_heartbeat("embed-test")  # the embedding pool is live; the chat pool is not
    plan = factories.plan("pro", pools=[small, embed_pool])
    small = routing.pool_choose(plan=plan, messages=SIMPLE)
    with pytest.raises(PoolSaturated):
        routing.pool_admit(pool=small, plan=plan)


def test_the_model_pickers_list_chat_pools_and_the_api_every_kind(
    pools, embed_pool, auth_client
):
    from gateway import selectors

    small, big = pools
    user = make_user("picker")
    assert selectors.pool_choices(user=user) == [big, small]
    assert selectors.pool_choices(user=user, kind=None) == [big, small, embed_pool]
    page = auth_client.get("/")
    assert page.status_code == 200
    assert embed_pool not in page.context["models"]
    assert small in page.context["models"]


def test_pool_load_reads_live_workers_and_waiting_jobs_together(pools):
    from inference import liveness

    assert liveness.pool_load(pool="nobody") == (0, 0)
    fake_heartbeat("big")
    queue_jobs("big", 4)
    assert liveness.pool_load(pool="big") == (1, None)  # no group: count
    client = redis_sync()
    client.xgroup_create(keys.queue_key("big"), protocol.GROUP, id="0")
    client.xreadgroup(protocol.GROUP, "w1", {keys.queue_key("big"): ">"}, count=3)
    assert liveness.pool_load(pool="big") == (1, 1)
