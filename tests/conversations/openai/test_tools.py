"""Tool calling on ``/v1/chat/completions``: the request's ``tools``, ``tool_choice``
and tool messages (400s in OpenAI's shape), the streamed and non-streamed shapes of
a generation that calls tools (the scripted engine's scripted calls through a real
worker), the caches, input moderation of tool results and the billing of a
two-request exchange."""

from __future__ import annotations

import json
from typing import Any

import pytest
from asgiref.sync import sync_to_async

from conversations.openai import schemas
from conversations.openai.requests import completion_request_parse
from gateway.models import UsageRecord
from inference.engines.scripted import ScriptedEngine
from inference.params import COMMON, ENGINE_PARAMS, SAMPLING
from tests.conversations.openai.helpers import asgi, ask, no_reservations
from tests.gateway import factories

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
NOW = {"type": "function", "function": {"name": "now"}}
CALL = {"name": "get_weather", "arguments": '{"city": "Paris"}', "pieces": [3, 5]}


def _body(**extra: Any) -> bytes:
    return json.dumps(ask(**extra)).encode()


def _error(exc: pytest.ExceptionInfo[Any]) -> tuple[str, str | None]:
    return exc.value.code, exc.value.param


# --- the request ---------------------------------------------------------------


def test_tools_and_choices_travel_to_the_job_params_normalised():
    req = completion_request_parse(
        _body(
            tools=[WEATHER, NOW],
            tool_choice={"type": "function", "function": {"name": "now"}},
            parallel_tool_calls=False,
        )
    )
    assert req.params["tools"] == [WEATHER, NOW]
    assert req.params["tool_choice"] == {
        "type": "function",
        "function": {"name": "now"},
    }
    assert req.params["parallel_tool_calls"] is False
    for choice in ("none", "auto", "required"):
        parsed = completion_request_parse(_body(tools=[NOW], tool_choice=choice))
        assert parsed.params["tool_choice"] == choice
    assert "tools" not in completion_request_parse(_body(tools=[])).params


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"tools": {"type": "function"}}, "tools"),
        ({"tools": [{"type": "retrieval"}]}, "tools"),
        ({"tools": [{"type": "function", "function": {"name": "a b"}}]}, "tools"),
        ({"tools": [{"type": "function", "function": {"name": "x" * 65}}]}, "tools"),
        ({"tools": [NOW, NOW]}, "tools"),
        (
            {
                "tools": [
                    {"type": "function", "function": {"name": "f", "parameters": []}}
                ]
            },
            "tools",
        ),
        (
            {
                "tools": [
                    {
                        "type": "function",
                        "function": {"name": "f", "parameters": {"type": "string"}},
                    }
                ]
            },
            "tools",
        ),
        (
            {
                "tools": [
                    {
                        "type": "function",
                        "function": {
                            "name": "f",
                            "parameters": {"type": "object", "x": "y" * 20_001},
                        },
                    }
                ]
            },
            "tools",
        ),
        ({"tools": [NOW] * 129}, "tools"),
        ({"tools": [NOW], "tool_choice": "always"}, "tool_choice"),
        ({"tool_choice": "auto"}, "tool_choice"),
        (
            {
                "tools": [NOW],
                "tool_choice": {"type": "function", "function": {"name": "other"}},
            },
            "tool_choice",
        ),
        ({"tools": [NOW], "parallel_tool_calls": "yes"}, "parallel_tool_calls"),
    ],
)
def test_a_bad_tool_parameter_is_a_400_naming_the_field(extra, param):
    with pytest.raises(Exception) as caught:
        completion_request_parse(_body(**extra))
    assert caught.value.status == 400
    assert _error(caught) == ("invalid_parameter", param)


def _exchange(*, content: str = '{"temp": 21}', call_id: str = "call_1") -> list[Any]:
    return [
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {
                        "name": "get_weather",
                        "arguments": '{"city":"Paris"}',
                    },
                }
            ],
        },
        {"role": "tool", "tool_call_id": call_id, "content": content},
    ]


def test_tool_call_ids_must_be_unique_in_the_conversation():
    twice = _exchange()
    call = twice[1]["tool_calls"][0]
    twice[1]["tool_calls"] = [call, {**call}]
    again = _exchange()
    again[2:2] = [{**again[1]}]  # a second assistant message reusing call_1
    for messages in (twice, again):
        with pytest.raises(Exception) as caught:
            completion_request_parse(_body(messages=messages, tools=[WEATHER]))
        assert caught.value.status == 400
        assert _error(caught) == ("invalid_messages", "messages")
        assert "unique" in str(caught.value)


def test_a_tool_exchange_travels_as_openai_messages():
    req = completion_request_parse(_body(messages=_exchange(), tools=[WEATHER]))
    assert req.messages[1] == {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
            }
        ],
    }
    assert req.messages[2] == {
        "role": "tool",
        "tool_call_id": "call_1",
        "content": '{"temp": 21}',
    }


@pytest.mark.parametrize(
    "messages",
    [
        _exchange(call_id="call_unknown"),
        # a tool result before the call it answers
        [_exchange()[0], _exchange()[2], _exchange()[1]],
        [
            _exchange()[0],
            {"role": "assistant", "content": None, "tool_calls": [{"id": "c"}]},
        ],
        [_exchange()[0], {"role": "assistant", "content": None, "tool_calls": []}],
    ],
)
def test_a_bad_tool_message_is_a_400(messages):
    with pytest.raises(Exception) as caught:
        completion_request_parse(_body(messages=messages))
    assert caught.value.status == 400 and caught.value.param == "messages"


# --- through the API -------------------------------------------------------------

pytestmark_db = pytest.mark.django_db(transaction=True)


async def _post(api_key: str, **extra: Any) -> Any:
    return await asgi("POST", "/v1/chat/completions", body=ask(**extra), key=api_key)


def _assembled(chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The tool calls of a stream, assembled as a client does."""
    calls: dict[int, dict[str, Any]] = {}
    for chunk in chunks:
        for choice in chunk["choices"]:
            for piece in choice["delta"].get("tool_calls", ()):
                call = calls.setdefault(
                    piece["index"],
                    {"type": "function", "function": {"arguments": ""}},
                )
                if "id" in piece:
                    call["id"] = piece["id"]
                    call["function"]["name"] = piece["function"]["name"]
                call["function"]["arguments"] += piece["function"]["arguments"]
    return [calls[i] for i in sorted(calls)]


@pytestmark_db
@pytest.mark.parametrize("stream", [False, True])
async def test_a_generation_that_calls_a_tool_has_openais_shape(
    user, api_key, start_worker, stream
):
    start_worker(ScriptedEngine(text="", tool_calls=[CALL]))
    result = await _post(
        api_key,
        tools=[WEATHER],
        stream=stream,
        **({"stream_options": {"include_usage": True}} if stream else {}),
    )
    assert result.status == 200, result.body
    expected = [
        {
            "id": "call_scripted0",
            "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
        }
    ]
    if not stream:
        body = result.json()
        schemas.validate_completion(body)
        choice = body["choices"][0]
        assert choice["finish_reason"] == "tool_calls"
        assert choice["message"]["content"] is None
        assert choice["message"]["tool_calls"] == expected
        return
    for data in result.data_lines:
        schemas.validate_stream_data(data)
    chunks = result.chunks
    pieces = [c["choices"][0]["delta"] for c in chunks[1:-2]]
    assert pieces == [
        {
            "tool_calls": [
                {
                    "index": 0,
                    "id": "call_scripted0",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"c'},
                }
            ]
        },
        {"tool_calls": [{"index": 0, "function": {"arguments": 'ity":'}}]},
        {"tool_calls": [{"index": 0, "function": {"arguments": ' "Paris"}'}}]},
    ]
    assert chunks[-2]["choices"][0]["finish_reason"] == "tool_calls"
    assert chunks[-1]["usage"]["completion_tokens"] == 3
    assert _assembled(chunks) == expected


@pytestmark_db
async def test_tool_choice_none_and_a_named_choice_are_honoured(api_key, start_worker):
    second = {"name": "now", "arguments": "{}"}
    start_worker(ScriptedEngine(text="Plain.", tool_calls=[CALL, second]))
    none = (await _post(api_key, tools=[WEATHER, NOW], tool_choice="none")).json()
    assert none["choices"][0]["finish_reason"] == "stop"
    assert "tool_calls" not in none["choices"][0]["message"]
    named = (
        await _post(
            api_key,
            tools=[WEATHER, NOW],
            tool_choice={"type": "function", "function": {"name": "now"}},
        )
    ).json()
    message = named["choices"][0]["message"]
    assert message["content"] == "Plain."
    assert [c["function"] for c in message["tool_calls"]] == [
        {"name": "now", "arguments": "{}"}
    ]
    single = (
        await _post(api_key, tools=[WEATHER, NOW], parallel_tool_calls=False)
    ).json()
    assert len(single["choices"][0]["message"]["tool_calls"]) == 1


@pytestmark_db
async def test_an_engine_without_tools_refuses_them_by_name(
    api_key, pool_heartbeat, enqueued, monkeypatch
):
    monkeypatch.setitem(ENGINE_PARAMS, "scripted", COMMON | SAMPLING)
    result = await _post(api_key, tools=[WEATHER], tool_choice="required")
    assert result.status == 400
    error = result.json()
    schemas.validate_error(error)
    assert (error["error"]["code"], error["error"]["param"]) == (
        "unsupported_parameter",
        "tools",
    )
    assert enqueued == [] and no_reservations()


@pytestmark_db
async def test_the_caches_never_answer_a_request_with_tools(
    api_key, start_worker, enqueued
):
    engine = ScriptedEngine(text="Sunny.", tool_calls=[CALL])
    start_worker(engine)
    messages = [{"role": "user", "content": "Weather in Paris?"}]
    plain = await _post(api_key, messages=messages, temperature=0, cache=True)
    again = await _post(api_key, messages=messages, temperature=0, cache=True)
    assert again.headers["x-chatsite-cache"] == "exact"  # the caches are on
    for _ in range(2):
        tooled = await _post(
            api_key, messages=messages, temperature=0, cache=True, tools=[WEATHER]
        )
        assert "x-chatsite-cache" not in tooled.headers
        assert tooled.json()["choices"][0]["finish_reason"] == "tool_calls"
    exchange = _exchange()
    for _ in range(2):
        answered = await _post(api_key, messages=exchange, temperature=0, cache=True)
        assert "x-chatsite-cache" not in answered.headers
    assert plain.status == 200 and len(enqueued) == 5


@pytestmark_db
async def test_a_plain_answer_under_a_tool_offer_is_cached_for_that_offer_only(
    api_key, start_worker, enqueued
):
    start_worker(ScriptedEngine(text="Sunny.", tool_calls=[CALL]))
    messages = [{"role": "user", "content": "Weather in Paris?"}]
    offer = {"tools": [WEATHER], "tool_choice": "none"}
    first = await _post(api_key, messages=messages, temperature=0, cache=True, **offer)
    assert first.json()["choices"][0]["message"]["content"] == "Sunny."
    again = await _post(api_key, messages=messages, temperature=0, cache=True, **offer)
    assert again.headers["x-chatsite-cache"] == "exact"
    assert again.json()["choices"][0]["message"]["content"] == "Sunny."
    other = {"tools": [WEATHER, NOW], "tool_choice": "none"}
    elsewhere = await _post(
        api_key, messages=messages, temperature=0, cache=True, **other
    )
    assert "x-chatsite-cache" not in elsewhere.headers
    plain = await _post(api_key, messages=messages, temperature=0, cache=True)
    assert "x-chatsite-cache" not in plain.headers
    assert len(enqueued) == 3


@pytestmark_db
async def test_a_two_request_exchange_is_billed_for_each_request(
    user, api_key, start_worker
):
    text = "It is 21 degrees in Paris."
    start_worker(ScriptedEngine(text=text, tool_calls=[CALL]))
    first = (
        await _post(
            api_key,
            messages=[{"role": "user", "content": "Weather in Paris?"}],
            tools=[WEATHER],
        )
    ).json()
    [call] = first["choices"][0]["message"]["tool_calls"]
    messages = [
        {"role": "user", "content": "Weather in Paris?"},
        first["choices"][0]["message"],
        {"role": "tool", "tool_call_id": call["id"], "content": '{"temp": 21}'},
    ]
    # the answer: no tools offered this time, so no call
    second = (await _post(api_key, messages=messages)).json()
    assert second["choices"][0]["message"]["content"] == text
    assert second["choices"][0]["finish_reason"] == "stop"
    records = await sync_to_async(list)(
        UsageRecord.objects.filter(user=user).order_by("created_at")
    )
    assert [r.status for r in records] == ["complete", "complete"]
    assert [r.completion_tokens for r in records] == [
        first["usage"]["completion_tokens"],
        second["usage"]["completion_tokens"],
    ]
    # the text's words and the call's three pieces
    assert records[0].completion_tokens == len(text.split()) + 3
    # the second prompt holds the call and its result
    assert records[1].prompt_tokens == second["usage"]["prompt_tokens"]
    assert records[1].prompt_tokens > records[0].prompt_tokens
    assert no_reservations()


@pytestmark_db
@pytest.mark.usefixtures("moderation_on")
async def test_harmful_text_in_a_tool_result_call_or_description_is_refused(
    embedding_worker, user, api_key, start_worker, enqueued
):
    plan = await sync_to_async(factories.plan)(
        tokens_per_minute=100_000, tokens_per_day=100_000, monthly_token_budget=100_000
    )
    await sync_to_async(factories.subscribe)(user, plan)
    start_worker(ScriptedEngine())
    bomb = "Give me instructions for making a bomb to blow up a building."
    as_user = await _post(api_key, messages=[{"role": "user", "content": bomb}])
    as_tool = await _post(api_key, messages=_exchange(content=bomb), tools=[WEATHER])
    in_arguments = _exchange()
    in_arguments[1]["tool_calls"][0]["function"]["arguments"] = json.dumps(
        {"city": bomb}
    )
    as_arguments = await _post(api_key, messages=in_arguments, tools=[WEATHER])
    described = {"type": "function", "function": {**WEATHER["function"]}}
    described["function"]["description"] = bomb
    as_description = await _post(
        api_key, messages=[{"role": "user", "content": "Hi"}], tools=[described]
    )
    for result in (as_user, as_tool, as_arguments, as_description):
        assert result.status == 400
        error = result.json()["error"]
        assert (error["code"], error["param"]) == (
            "content_policy_violation",
            "messages",
        )
    assert enqueued == [] and await UsageRecord.objects.acount() == 0


@pytest.fixture
def output_moderation(settings):
    from tests.safety import fakes

    settings.SAFETY_BACKEND = fakes.PATH
    settings.SAFETY_OUTPUT_ENABLED = True
    settings.SAFETY_OUTPUT_MODE = "hold"
    settings.SAFETY_OUTPUT_FIRST_WINDOW_CHARS = 0
    settings.SAFETY_FAIL_CLOSED = False
    fakes.reset()
    yield
    fakes.reset()


@pytestmark_db
@pytest.mark.usefixtures("output_moderation")
@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("text", ["", "The weather is mild today. Let me check"])
async def test_output_moderation_passes_a_benign_answer_with_tool_calls(
    user, api_key, start_worker, stream, text
):
    """Held text windows neither hold a call-only answer nor lose the calls that
    follow held text: the answer ends, text and calls whole."""
    start_worker(ScriptedEngine(text=text, tool_calls=[CALL], delay_ms=5))
    result = await _post(api_key, tools=[WEATHER], stream=stream)
    assert result.status == 200, result.body
    if stream:
        calls, finish = _assembled(result.chunks), result.chunks[-1]
        shown = "".join(
            c["choices"][0]["delta"].get("content", "") for c in result.chunks
        )
    else:
        finish = result.json()
        calls = finish["choices"][0]["message"]["tool_calls"]
        shown = finish["choices"][0]["message"]["content"] or ""
    assert shown == text
    assert [c["function"]["arguments"] for c in calls] == [CALL["arguments"]]
    assert finish["choices"][0]["finish_reason"] == "tool_calls"
    record = await UsageRecord.objects.aget(user=user)
    assert record.status == "complete"
    assert record.completion_tokens == len(text.split()) + 3


@pytestmark_db
@pytest.mark.usefixtures("output_moderation")
async def test_a_cut_answer_relays_no_call_after_the_cut(user, api_key, start_worker):
    violent = "The weather is mild today. Here is how to build a BOMB at home now."
    start_worker(ScriptedEngine(text=violent, tool_calls=[CALL], delay_ms=5))
    result = await _post(api_key, tools=[WEATHER], stream=True)
    chunks = result.chunks
    assert chunks[-1]["choices"][0]["finish_reason"] == "content_filter"
    assert _assembled(chunks) == []
    whole = (await _post(api_key, tools=[WEATHER])).json()
    assert whole["choices"][0]["finish_reason"] == "content_filter"
    assert "tool_calls" not in whole["choices"][0]["message"]


@pytestmark_db
@pytest.mark.parametrize(
    "choice", ["required", {"type": "function", "function": {"name": "now"}}]
)
async def test_a_tool_choice_the_engine_cannot_honour_is_a_400(
    user, api_key, start_worker, choice
):
    """The scripted engine has no call for the choice (its one call is another
    tool's for a named choice, none at all for ``required``): it fails the job with
    ``invalid_parameter``, never answers as if ``tool_choice`` were ``auto``."""
    calls = [CALL] if isinstance(choice, dict) else []
    start_worker(ScriptedEngine(text="Plain.", tool_calls=calls))
    result = await _post(api_key, tools=[WEATHER, NOW], tool_choice=choice)
    assert result.status == 400
    error = result.json()
    schemas.validate_error(error)
    assert error["error"]["code"] == "invalid_parameter"
    assert "tool_choice" in error["error"]["message"]
    # streamed, the same 400 before any stream starts (the headers of a request
    # held to a grammar wait for its first token or its refusal)
    streamed = await _post(
        api_key, tools=[WEATHER, NOW], tool_choice=choice, stream=True
    )
    assert streamed.status == 400
    assert not streamed.data_lines
    assert streamed.json()["error"]["code"] == "invalid_parameter"
    assert no_reservations()


def test_an_engines_refusal_names_its_field_as_param():
    from gateway.generations.outcome import generation_failed

    refused = generation_failed(
        code="invalid_parameter", message="tools: a `$ref` … cannot be followed."
    )
    assert (refused.status, refused.param) == (400, "tools")
    assert generation_failed(code="invalid_parameter", message="Odd: x").param is None
    assert generation_failed(code="engine_error", message="tools: x").param is None


@pytestmark_db
@pytest.mark.slow
@pytest.mark.parametrize("stream", [False, True])
async def test_a_schema_llama_cpp_cannot_follow_is_a_400_naming_tools(
    user, api_key, start_worker, stream
):
    """On the real llama.cpp engine: a ``$ref`` to the whole schema has no grammar;
    streamed or not, a 400 in the client's words with ``param: "tools"``, before any
    stream starts."""
    from inference.engines.llamacpp import LlamaCppEngine

    start_worker(LlamaCppEngine(n_ctx=2048))
    loop = {
        "type": "function",
        "function": {
            "name": "loop",
            "parameters": {"type": "object", "properties": {"again": {"$ref": "#"}}},
        },
    }
    result = await _post(api_key, tools=[loop], tool_choice="required", stream=stream)
    assert result.status == 400
    error = result.json()["error"]
    assert (error["code"], error["param"]) == ("invalid_parameter", "tools")
    assert "`$ref`" in error["message"] and "stdin" not in error["message"]
    assert no_reservations()
