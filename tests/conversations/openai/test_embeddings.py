"""``POST /v1/embeddings`` and the kinds in ``GET /v1/models``: with the official
``openai`` client (in-process over httpx's ASGI transport, and against the web process,
uvicorn, with an embedding worker process), and raw requests for the error shapes. A real embedding
worker (all-MiniLM-L6-v2) serves the pool."""

from __future__ import annotations

import asyncio
import base64
import struct
from typing import Any

import httpx
import openai
import pytest
from asgiref.sync import sync_to_async
from django.conf import settings

from conversations.openai import schemas
from gateway import quota, selectors, services
from gateway.models import ModelPool, UsageRecord
from inference import keys
from inference.connections import redis_async
from inference.embeddings import EMBEDDING_DIM, embed_texts
from tests.conftest import fake_heartbeat, make_user
from tests.conversations.openai.helpers import asgi, ask, no_reservations
from tests.gateway import factories
from tests.stack import running_stack

pytestmark = pytest.mark.django_db(transaction=True)

MODEL = "all-MiniLM-L6-v2"
TEXTS = ["The cat sat on the mat.", "Quarterly revenue grew by ten percent."]


@pytest.fixture
def embed_pool(api_key, request):
    """The embedding ModelPool, named after EMBEDDING_POOL: with a live worker the
    worker fixture (which points EMBEDDING_POOL at the real model's pool) goes first."""
    if "embedding_worker" in request.fixturenames:
        request.getfixturevalue("embedding_worker")
    # the seeded `embed` pool (in the default plan) becomes the worker's pool: one
    # pool per model, as deployed
    ModelPool.objects.filter(name="embed").exclude(name=settings.EMBEDDING_POOL).update(
        name=settings.EMBEDDING_POOL
    )
    return factories.embedding_pool()


def _client(api_key: str, **options: Any) -> openai.AsyncOpenAI:
    from chatsite.asgi import application

    return openai.AsyncOpenAI(
        base_url="http://testserver/v1",
        api_key=api_key,
        max_retries=0,
        http_client=httpx.AsyncClient(transport=httpx.ASGITransport(app=application)),
        **options,
    )


def _decode(b64: str) -> list[float]:
    raw = base64.b64decode(b64)
    return list(struct.unpack(f"<{len(raw) // 4}f", raw))


def _close(a: list[float], b: list[float]) -> bool:
    """Equal up to float32 rounding (a batch of other lengths pads differently)."""
    return len(a) == len(b) and all(
        abs(x - y) <= 1e-5 for x, y in zip(a, b, strict=True)
    )


def _used(user) -> list[int]:
    limits = selectors.plan_limits(plan=selectors.plan_for_user(user=user))
    return [w.used for w in quota.quota_windows(user_id=user.pk, limits=limits)]


async def test_the_openai_client_embeds_a_string_and_a_list_as_embed_texts_does(
    user, api_key, embed_pool, embedding_worker
):
    client = _client(api_key)
    # the client asks for base64 unless told otherwise, and decodes it
    one = await client.embeddings.create(model=MODEL, input=TEXTS[0])
    many = await client.embeddings.create(
        model=settings.EMBEDDING_POOL, input=TEXTS, encoding_format="float", user="u1"
    )
    expected = await sync_to_async(embed_texts)(TEXTS)

    assert [d.index for d in many.data] == [0, 1]
    assert len(one.data) == 1 and len(one.data[0].embedding) == EMBEDDING_DIM
    assert _close(one.data[0].embedding, expected.vectors[0])
    for item, vector in zip(many.data, expected.vectors, strict=True):
        assert _close(item.embedding, vector)
    assert one.model == many.model == MODEL
    assert many.usage.prompt_tokens == many.usage.total_tokens == expected.tokens
    assert 0 < one.usage.prompt_tokens < expected.tokens

    records = [r async for r in UsageRecord.objects.filter(user=user)]
    assert sorted(r.prompt_tokens for r in records) == sorted(
        [one.usage.prompt_tokens, many.usage.prompt_tokens]
    )
    assert {(r.pool, r.model, r.completion_tokens, r.status) for r in records} == {
        (settings.EMBEDDING_POOL, MODEL, 0, "complete")
    }
    assert all(r.cost > 0 for r in records)
    charged = one.usage.prompt_tokens + many.usage.prompt_tokens
    assert await sync_to_async(_used)(user) == [charged, charged, charged]
    assert no_reservations()


async def test_float_and_base64_responses_match_their_schema_and_each_other(
    api_key, embed_pool, embedding_worker
):
    body = {"model": MODEL, "input": TEXTS}
    floats = await asgi("POST", "/v1/embeddings", body=body, key=api_key)
    packed = await asgi(
        "POST",
        "/v1/embeddings",
        body={**body, "encoding_format": "base64"},
        key=api_key,
    )
    assert floats.status == packed.status == 200
    schemas.validate_embedding_list(floats.json())
    schemas.validate_embedding_list(packed.json())
    for f, p in zip(floats.json()["data"], packed.json()["data"], strict=True):
        assert isinstance(p["embedding"], str)
        # the same float32 values, whichever way they travel
        assert _decode(p["embedding"]) == [
            struct.unpack("<f", struct.pack("<f", v))[0] for v in f["embedding"]
        ]
    assert list(floats.json()) == ["object", "data", "model", "usage"]


@pytest.mark.usefixtures("one_minute")
async def test_an_embeddings_response_carries_the_request_rate_headers(
    user, api_key, embed_pool, embedding_worker
):
    """OpenAI's ``x-ratelimit-*-requests`` of the tighter window (the user's 5 beside
    the key's 8), 40 s to the minute's end."""
    plan = await sync_to_async(factories.plan)(
        requests_per_minute=5, key_requests_per_minute=8
    )
    await sync_to_async(factories.subscribe)(user, plan)
    for remaining in ("4", "3"):
        result = await asgi(
            "POST", "/v1/embeddings", body={"model": MODEL, "input": TEXTS}, key=api_key
        )
        assert result.status == 200, result.body
        assert result.headers["x-ratelimit-limit-requests"] == "5"
        assert result.headers["x-ratelimit-remaining-requests"] == remaining
        assert result.headers["x-ratelimit-reset-requests"] == "40s"


async def test_over_quota_is_a_429_and_nothing_stays_reserved(
    user, api_key, embed_pool, embedding_worker
):
    plan = await sync_to_async(factories.plan)(pools=[embed_pool], tokens_per_minute=20)
    await sync_to_async(factories.subscribe)(user, plan)
    with pytest.raises(openai.RateLimitError) as exc:
        await _client(api_key).embeddings.create(model=MODEL, input="word " * 100)
    assert exc.value.status_code == 429
    assert exc.value.response.headers["x-should-retry"] == "false"
    assert exc.value.body["code"] == "quota_minute"
    # advice an embeddings user can follow (no max_tokens here)
    assert "fewer or shorter inputs" in exc.value.body["message"]
    assert "max_tokens" not in exc.value.body["message"]
    assert no_reservations()
    assert not await UsageRecord.objects.filter(user=user).aexists()
    # a small request still fits
    ok = await _client(api_key).embeddings.create(model=MODEL, input="hi")
    assert await sync_to_async(_used)(user) == [ok.usage.prompt_tokens] * 3


async def test_an_input_longer_than_the_model_reads_is_a_400_naming_the_limit(
    user, api_key, embed_pool
):
    """all-MiniLM-L6-v2 reads 256 word pieces: a longer text would be embedded from
    its beginning only, so it is refused (counted on the web tier, before a worker
    or the quota is involved); a text of 256 pieces is accepted."""
    long_text = "The quick brown fox jumps over the lazy dog. " * 40  # ~400 pieces
    result = await asgi(
        "POST",
        "/v1/embeddings",
        body={"model": MODEL, "input": ["short", long_text]},
        key=api_key,
    )
    assert result.status == 400, result.body
    error = result.json()["error"]
    assert (error["code"], error["param"]) == ("input_too_long", "input")
    assert "input[1]" in error["message"] and "256 tokens" in error["message"]
    assert no_reservations() and await UsageRecord.objects.acount() == 0
    fits = "word " * 254  # 254 pieces + [CLS] + [SEP]
    result = await asgi(
        "POST", "/v1/embeddings", body={"model": MODEL, "input": fits}, key=api_key
    )
    assert result.status == 503  # past the length check: no worker in this test


async def test_no_embedding_worker_is_a_503_with_retry_after_and_nothing_reserved(
    user, api_key, embed_pool
):
    result = await asgi(
        "POST", "/v1/embeddings", body={"model": MODEL, "input": "hi"}, key=api_key
    )
    assert result.status == 503
    assert int(result.headers["retry-after"]) >= 1
    schemas.validate_error(result.json())
    error = result.json()["error"]
    assert error["code"] == "embedding_unavailable"
    assert MODEL in error["message"]
    assert no_reservations()
    with pytest.raises(openai.InternalServerError):
        await _client(api_key).embeddings.create(model=MODEL, input="hi")
    assert await sync_to_async(_used)(user) == [0, 0, 0]


async def test_a_worker_that_does_not_answer_in_time_is_a_503_and_nothing_reserved(
    user, api_key, embed_pool, settings
):
    settings.API_EMBEDDING_TIMEOUT_S = 0.5
    fake_heartbeat(settings.EMBEDDING_POOL)  # looks live, never answers
    result = await asgi(
        "POST", "/v1/embeddings", body={"model": MODEL, "input": "hi"}, key=api_key
    )
    assert result.status == 503
    assert result.json()["error"]["code"] == "embedding_timeout"
    assert no_reservations()
    assert await sync_to_async(_used)(user) == [0, 0, 0]


async def test_a_client_that_disconnects_while_waiting_leaves_no_reservation(
    user, api_key, embed_pool
):
    fake_heartbeat(settings.EMBEDDING_POOL)  # the job waits: nobody takes it
    client = redis_async()

    async def once_enqueued() -> None:
        while not await client.xlen(keys.queue_key(settings.EMBEDDING_POOL)):
            await asyncio.sleep(0.01)
        assert not no_reservations()  # reserved while it waits

    await asgi(
        "POST",
        "/v1/embeddings",
        body={"model": MODEL, "input": TEXTS},
        key=api_key,
        disconnect_after=once_enqueued,
        timeout=10,
    )
    assert no_reservations()
    assert await sync_to_async(_used)(user) == [0, 0, 0]
    assert not await UsageRecord.objects.filter(user=user).aexists()


async def test_dimensions_are_refused_unless_they_are_the_models(
    api_key, embed_pool, embedding_worker
):
    client = _client(api_key)
    with pytest.raises(openai.BadRequestError) as exc:
        await client.embeddings.create(model=MODEL, input="hi", dimensions=256)
    assert exc.value.body["param"] == "dimensions"
    assert exc.value.body["code"] == "dimensions_unsupported"
    assert "384" in exc.value.body["message"]
    same = await client.embeddings.create(
        model=MODEL, input="hi", dimensions=EMBEDDING_DIM
    )
    assert len(same.data[0].embedding) == EMBEDDING_DIM
    assert no_reservations()


LONG = "x" * 32_001


@pytest.mark.parametrize(
    ("body", "param", "code"),
    [
        ({"model": MODEL}, "input", "missing_input"),
        ({"model": MODEL, "input": ""}, "input", "invalid_input"),
        ({"model": MODEL, "input": []}, "input", "invalid_input"),
        ({"model": MODEL, "input": ["ok", ""]}, "input", "invalid_input"),
        ({"model": MODEL, "input": ["ok", 3]}, "input", "invalid_input"),
        ({"model": MODEL, "input": {"text": "hi"}}, "input", "invalid_input"),
        ({"model": MODEL, "input": [1, 2, 3]}, "input", "unsupported_input"),
        ({"model": MODEL, "input": [[1, 2], [3]]}, "input", "unsupported_input"),
        ({"model": MODEL, "input": ["a"] * 2049}, "input", "too_many_inputs"),
        ({"model": MODEL, "input": LONG}, "input", "input_too_long"),
        ({"model": MODEL, "input": "\ud800"}, "input", "invalid_character"),
        ({"input": "hi"}, "model", "missing_model"),
        (
            {"model": MODEL, "input": "hi", "encoding_format": "int8"},
            "encoding_format",
            "invalid_parameter",
        ),
        ({"model": MODEL, "input": "hi", "dimensions": 0}, "dimensions", None),
        ({"model": MODEL, "input": "hi", "user": 7}, "user", "invalid_parameter"),
        ({"model": "default", "input": "hi"}, "model", "wrong_model_kind"),
        ({"model": "no-such-model", "input": "hi"}, "model", "model_not_found"),
    ],
)
async def test_a_bad_request_is_a_4xx_in_openai_shape_naming_the_field(
    api_key, embed_pool, body, param, code
):
    fake_heartbeat(settings.EMBEDDING_POOL)
    result = await asgi("POST", "/v1/embeddings", body=body, key=api_key)
    assert result.status == (404 if code == "model_not_found" else 400)
    schemas.validate_error(result.json())
    error = result.json()["error"]
    assert error["param"] == param
    if code is not None:
        assert error["code"] == code
    assert no_reservations()


async def test_a_chat_completion_for_the_embedding_model_is_a_400_naming_the_endpoint(
    api_key, embed_pool
):
    result = await asgi(
        "POST",
        "/v1/chat/completions",
        body=ask(model=settings.EMBEDDING_POOL),  # its id in GET /v1/models
        key=api_key,
    )
    assert result.status == 400
    error = result.json()["error"]
    assert (error["code"], error["param"]) == ("wrong_model_kind", "model")
    assert "/v1/embeddings" in error["message"]
    assert no_reservations()


async def test_a_key_sees_and_charges_only_its_own_user(
    user, api_key, embed_pool, embedding_worker
):
    other = await sync_to_async(make_user)("bob")
    _, other_key = await sync_to_async(services.api_key_create)(user=other)
    mine = await _client(api_key).embeddings.create(model=MODEL, input=TEXTS)
    theirs = await _client(other_key).embeddings.create(model=MODEL, input="hello")
    assert [r.prompt_tokens async for r in UsageRecord.objects.filter(user=user)] == [
        mine.usage.prompt_tokens
    ]
    assert [r.prompt_tokens async for r in UsageRecord.objects.filter(user=other)] == [
        theirs.usage.prompt_tokens
    ]
    assert await sync_to_async(_used)(other) == [theirs.usage.prompt_tokens] * 3
    # a plan without the embedding pool: the model is not theirs to use
    chat_only = await sync_to_async(factories.plan)(
        pools=[await sync_to_async(factories.pool)("default", model="scripted-1")]
    )
    await sync_to_async(factories.subscribe)(other, chat_only)
    with pytest.raises(openai.PermissionDeniedError):
        await _client(other_key).embeddings.create(model=MODEL, input="hello")
    models = [m.id for m in (await _client(other_key).models.list()).data]
    assert models == ["default"]
    # no key, a wrong key: 401, nothing embedded
    for key in (None, "sk-not-a-real-key"):
        result = await asgi(
            "POST", "/v1/embeddings", body={"model": MODEL, "input": "x"}, key=key
        )
        assert result.status == 401
    assert await UsageRecord.objects.acount() == 2


async def test_models_lists_chat_and_embedding_models_with_their_kind(
    user, api_key, embed_pool
):
    await sync_to_async(factories.pool)("off", enabled=False)
    result = await asgi("GET", "/v1/models", key=api_key)
    assert result.status == 200
    schemas.validate_model_list(result.json())
    assert [(m["id"], m["root"], m["kind"]) for m in result.json()["data"]] == [
        ("default", "scripted-1", "chat"),
        (settings.EMBEDDING_POOL, MODEL, "embedding"),
    ]
    listed = await _client(api_key).models.list()
    assert [(m.id, m.kind) for m in listed.data] == [
        ("default", "chat"),
        (settings.EMBEDDING_POOL, "embedding"),
    ]


async def test_a_wrong_method_is_a_405(api_key):
    result = await asgi("GET", "/v1/embeddings", key=api_key)
    assert result.status == 405
    assert result.headers["allow"] == "POST"


@pytest.mark.slow
def test_the_openai_client_against_the_web_process_and_an_embedding_worker_process(
    user, api_key, embed_pool
):
    with running_stack(
        ["--pool", settings.EMBEDDING_POOL, "--engine", "sentence-transformers"]
    ) as base:
        client = openai.OpenAI(base_url=base + "/v1", api_key=api_key, max_retries=0)
        kinds = {m.id: m.kind for m in client.models.list()}
        assert kinds[settings.EMBEDDING_POOL] == "embedding"
        packed = client.embeddings.create(model=MODEL, input=TEXTS)
        floats = client.embeddings.create(
            model=MODEL, input=TEXTS[0], encoding_format="float"
        )
    assert [len(d.embedding) for d in packed.data] == [EMBEDDING_DIM] * 2
    assert _close(packed.data[0].embedding, floats.data[0].embedding)
    records = UsageRecord.objects.filter(user=user)
    assert sorted(r.prompt_tokens for r in records) == sorted(
        [packed.usage.prompt_tokens, floats.usage.prompt_tokens]
    )
    assert no_reservations()
