"""Every /v1/chat/completions parameter is honoured or refused by name
(conversations/openai/params.py, the engine table in inference/params.py, the gateway's
check at admission): out-of-range values are 400s, fields no engine implements are
400 ``unsupported_parameter``, a parameter the pool's engine lacks is refused before
anything is reserved, and the ids of GET /v1/models are the only model ids."""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import sync_to_async

from chatsite.errors import InvalidInput
from conversations.openai.params import params_parse
from gateway.generations.params_fit import params_check
from gateway.models import ModelPool, UsageRecord
from inference import client as inference_client
from inference import protocol
from inference.engines.scripted import ScriptedEngine
from inference.params import ENGINE_PARAMS
from tests.conftest import fake_heartbeat
from tests.conversations.openai.helpers import asgi, ask, no_reservations
from tests.gateway import factories

pytestmark = pytest.mark.django_db(transaction=True)

SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}}


async def _refused(api_key: str, body: dict[str, Any]) -> dict[str, Any]:
    return await _refused_at(api_key, "/v1/chat/completions", body)


async def _refused_at(api_key: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
    result = await asgi("POST", path, body=body, key=api_key)
    assert result.status == 400, result.body
    assert await UsageRecord.objects.acount() == 0 and no_reservations()
    error: dict[str, Any] = result.json()["error"]
    assert error["type"] == "invalid_request_error"
    return error


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("temperature", 2.5),
        ("top_p", 1.01),
        ("presence_penalty", 2.5),
        ("frequency_penalty", -3),
        ("logit_bias", {"17": 101}),
        ("logit_bias", {"token": 1}),
        ("logit_bias", {str(i): 1 for i in range(301)}),
        ("seed", 1.5),
        ("seed", 2**64),
        ("top_logprobs", 21),
        ("response_format", {"type": "yaml"}),
        ("response_format", {"type": "json_schema", "json_schema": {"name": "x"}}),
        ("max_completion_tokens", 0),
        ("user", 7),
    ],
)
async def test_an_out_of_range_value_is_a_400_naming_the_field(
    user, api_key, field, value
):
    error = await _refused(api_key, ask(**{field: value}))
    assert (error["code"], error["param"]) == ("invalid_parameter", field)
    assert f"`{field}" in error["message"]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("logprobs", True),
        ("top_logprobs", 2),
        ("n", 3),
        ("functions", [{"name": "f"}]),
        ("function_call", "auto"),
        ("modalities", ["audio"]),
        ("no_such_field", 1),
    ],
)
async def test_a_field_no_engine_implements_is_refused_by_name(
    user, api_key, field, value
):
    error = await _refused(api_key, ask(**{field: value}))
    assert (error["code"], error["param"]) == ("unsupported_parameter", field)
    assert f"`{field}`" in error["message"]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("presence_penalty", 0.5),
        ("frequency_penalty", 0.5),
        ("logit_bias", {"17": -100}),
        ("response_format", {"type": "json_object"}),
    ],
)
async def test_a_parameter_the_pools_engine_lacks_is_refused_before_reserving(
    user, api_key, pool_heartbeat, enqueued, field, value
):
    """The test pool runs the scripted engine, which implements none of these."""
    error = await _refused(api_key, ask(**{field: value}))
    assert (error["code"], error["param"]) == ("unsupported_parameter", field)
    assert "scripted" in error["message"]
    assert enqueued == []


async def test_max_tokens_over_the_models_limit_is_a_400_naming_the_limit(
    user, api_key, pool_heartbeat, enqueued
):
    for value in (10**30, 1e30):
        error = await _refused(api_key, ask(max_tokens=value))
        assert (error["code"], error["param"]) == ("invalid_parameter", "max_tokens")
        assert "1,024" in error["message"]
    assert enqueued == []


async def test_only_the_ids_of_the_model_list_are_models(user, api_key, pool_heartbeat):
    listed = await asgi("GET", "/v1/models", key=api_key)
    assert "default" in [m["id"] for m in listed.json()["data"]]
    # the pool's model name (its GGUF file's, say) is not an id
    result = await asgi(
        "POST", "/v1/chat/completions", body=ask(model="scripted-1"), key=api_key
    )
    assert result.status == 404
    assert result.json()["error"]["code"] == "model_not_found"
    assert await UsageRecord.objects.acount() == 0 and no_reservations()


async def test_the_engines_parameters_travel_on_the_job(user, api_key, monkeypatch):
    """A llama.cpp pool takes them all; they reach the job under the table's names."""
    await sync_to_async(factories.pool)(
        "default", model="scripted-1", engine=ModelPool.Engine.LLAMACPP
    )
    fake_heartbeat()
    jobs: list[protocol.Job] = []
    original = inference_client.job_enqueue

    def spy(*, pool: str, job: protocol.Job, **options: Any) -> Any:
        jobs.append(job)
        return original(pool=pool, job=job, **options)

    monkeypatch.setattr(inference_client, "job_enqueue", spy)
    body = ask(
        stream=True,
        max_completion_tokens=7,
        max_tokens=900,
        temperature=0.5,
        seed=42,
        stop="END",
        presence_penalty=1,
        frequency_penalty=-1,
        logit_bias={"0017": 5},
        response_format={"type": "json_schema", "json_schema": {"schema": SCHEMA}},
        logprobs=False,
        n=1,
        user="end-user-1",
    )
    result = await asgi(
        "POST",
        "/v1/chat/completions",
        body=body,
        key=api_key,
        disconnect_when=lambda r: True,
    )
    assert result.status == 200, result.body
    assert jobs[0].params == {
        "max_tokens": 7,
        "temperature": 0.5,
        "seed": 42,
        "stop": ["END"],
        "presence_penalty": 1.0,
        "frequency_penalty": -1.0,
        "logit_bias": {"17": 5.0},
        "response_format": {"type": "json_schema", "schema": SCHEMA},
    }


async def test_stop_cuts_the_scripted_answer(user, api_key, start_worker):
    start_worker(ScriptedEngine(text="One two three END four five."))
    result = await asgi(
        "POST", "/v1/chat/completions", body=ask(stop=["END"]), key=api_key
    )
    choice = result.json()["choices"][0]
    assert choice["message"]["content"] == "One two three "
    assert choice["finish_reason"] == "stop"


def test_the_engine_table_covers_every_parameter_the_api_passes_on():
    parsed = params_parse(
        {
            "max_tokens": 5,
            "temperature": 0,
            "top_p": 1,
            "stop": ["x"],
            "seed": 1,
            "presence_penalty": 0,
            "frequency_penalty": 0,
            "logit_bias": {"1": 1},
            "response_format": {"type": "json_object"},
            "tools": [{"type": "function", "function": {"name": "f"}}],
            "tool_choice": "auto",
            "parallel_tool_calls": True,
        }
    )
    every = set().union(*ENGINE_PARAMS.values())
    assert set(parsed) == every
    for engine in ("llamacpp", "vllm", "openai"):
        params_check(
            pool=ModelPool(name="p", engine=engine),
            params={k: v for k, v in parsed.items() if k in ENGINE_PARAMS[engine]},
            strict=True,
        )
    assert ENGINE_PARAMS["openai"] == set(parsed)
    with pytest.raises(InvalidInput) as refused:
        params_check(
            pool=ModelPool(name="p", engine="scripted"), params=parsed, strict=True
        )
    assert refused.value.param == "presence_penalty"


async def test_an_unknown_embeddings_field_is_refused_by_name(user, api_key):
    error = await _refused_at(
        api_key, "/v1/embeddings", {"model": "embed", "input": "hi", "truncate": 1}
    )
    assert (error["code"], error["param"]) == ("unsupported_parameter", "truncate")


def test_response_format_text_is_the_default_and_adds_nothing():
    assert params_parse({"response_format": {"type": "text"}, "stop": []}) == {}


def test_a_parameter_the_engine_finds_invalid_while_running_is_a_400():
    """A logit_bias token id outside the vocabulary, a JSON Schema llama.cpp cannot
    compile: the engine's error event is the client's fault, not a 500."""
    from gateway.generations.outcome import generation_failed
    from inference.params import ERROR_INVALID_PARAMETER

    failed = generation_failed(code=ERROR_INVALID_PARAMETER, message="logit_bias: x")
    assert (failed.status, failed.code, failed.retryable) == (
        400,
        "invalid_parameter",
        False,
    )
