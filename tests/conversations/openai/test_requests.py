"""Parsing and validating a /v1/chat/completions body (conversations/openai/requests.py):
through the views (a 400 naming the problem, nothing reserved or billed) and directly."""

from __future__ import annotations

import json
from typing import Any

import pytest

from chatsite.errors import InvalidInput, PayloadTooLarge
from conversations.openai.requests import CompletionRequest, completion_request_parse
from gateway.models import UsageRecord
from inference.engines.scripted import DEFAULT_TEXT, ScriptedEngine
from tests.conversations.openai.helpers import asgi, ask, capital, no_reservations

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"model": "default"}, "invalid_messages"),
        ({"messages": [{"role": "user", "content": "hi"}]}, "missing_model"),
        (ask(messages=[{"role": "function", "content": "x"}]), "invalid_role"),
        (
            ask(messages=[{"role": "tool", "content": "x"}]),
            "invalid_tool_call_id",
        ),
        (ask(messages=[{"role": "user", "content": 3}]), "invalid_content"),
        (ask(messages=[{"role": "system", "content": "only"}]), "no_prompt"),
        (ask(temperature=3), "invalid_parameter"),
        (ask(max_tokens=0), "invalid_parameter"),
        (ask(stop=["a", "b", "c", "d", "e"]), "invalid_parameter"),
        (ask(stream_options={"include_usage": True}), "invalid_parameter"),
        (ask(n=2), "unsupported_parameter"),
        (
            ask(stream=True, stream_options={"include_usage": "false"}),
            "invalid_parameter",
        ),
    ],
)
async def test_invalid_requests_are_400s_naming_the_problem(user, api_key, body, code):
    result = await asgi("POST", "/v1/chat/completions", body=body, key=api_key)
    assert result.status == 400, result.body
    error = result.json()["error"]
    assert (error["code"], error["type"]) == (code, "invalid_request_error")
    assert await UsageRecord.objects.acount() == 0 and no_reservations()


@pytest.mark.parametrize(
    "body",
    [
        ask(messages=[{"role": "user", "content": "hi \ud800"}]),
        ask(
            messages=[{"role": "user", "content": [{"type": "text", "text": "\udc00"}]}]
        ),
        ask(
            messages=[
                {"role": "assistant", "content": "\udfff"},
                {"role": "user", "content": "hi"},
            ]
        ),
        ask(stop="\ud800"),
        ask(temperature=0, messages=[{"role": "user", "content": "\ud83d"}]),
    ],
    ids=["content", "text-part", "assistant", "stop", "cacheable"],
)
async def test_an_unpaired_surrogate_escape_is_a_400_not_a_500(
    user, api_key, pool_heartbeat, body
):
    """JSON may escape a lone UTF-16 surrogate (``"\\ud800"``, as json.dumps sends it
    here); Python decodes it to a str that UTF-8 cannot encode, so the job (Redis) or
    the cache key would fail on it with a 500."""
    result = await asgi("POST", "/v1/chat/completions", body=body, key=api_key)
    assert result.status == 400, result.body
    error = result.json()["error"]
    assert error["code"] == "invalid_character" and "surrogate" in error["message"]
    assert await UsageRecord.objects.acount() == 0 and no_reservations()


async def test_a_non_boolean_cache_flag_is_a_400(api_key):
    result = await asgi(
        "POST", "/v1/chat/completions", body=capital(cache="yes"), key=api_key
    )
    assert result.status == 400
    assert result.json()["error"]["code"] == "invalid_parameter"


async def test_text_parts_and_developer_messages_are_accepted(api_key, start_worker):
    start_worker(ScriptedEngine())
    body = ask(
        messages=[
            {"role": "developer", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "Hi"}]},
        ]
    )
    result = await asgi("POST", "/v1/chat/completions", body=body, key=api_key)
    assert result.status == 200
    assert result.json()["choices"][0]["message"]["content"] == DEFAULT_TEXT


# --- completion_request_parse directly ------------------------------------------------


def _parse(body: dict[str, Any]) -> CompletionRequest:
    return completion_request_parse(json.dumps(body).encode())


def test_a_body_becomes_engine_ready_messages_and_sampling_params():
    req = _parse(
        ask(
            model=" default ",
            messages=[
                {"role": "developer", "content": "Be brief."},
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "Hi "},
                        {"type": "text", "text": "there"},
                    ],
                },
                {"role": "assistant", "content": None},
                {"role": "user", "content": "Again"},
            ],
            max_completion_tokens=5,
            max_tokens=9,
            temperature=0,
            top_p=1,
            stop="END",
            stream=True,
            stream_options={"include_usage": True},
            cache=False,
        )
    )
    assert req == CompletionRequest(
        model="default",
        messages=[
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Hi there"},
            {"role": "assistant", "content": ""},
            {"role": "user", "content": "Again"},
        ],
        params={"max_tokens": 5, "temperature": 0.0, "top_p": 1.0, "stop": ["END"]},
        stream=True,
        include_usage=True,
        cache=False,
    )


@pytest.mark.parametrize(
    ("body", "param"),
    [
        (ask(messages=[{"role": "user", "content": "a\x00"}]), "messages"),
        (ask(messages=[]), "messages"),
        (ask(model=""), "model"),
        (ask(temperature="hot"), "temperature"),
        (ask(max_tokens=True), "max_tokens"),
        (ask(stop=[""]), "stop"),
        (ask(stream="yes"), "stream"),
        (ask(stream=True, stream_options=[]), "stream_options"),
        (ask(cache=1), "cache"),
    ],
)
def test_an_invalid_field_is_named_in_param(body, param):
    with pytest.raises(InvalidInput) as caught:
        _parse(body)
    assert caught.value.param == param


@pytest.mark.parametrize("raw", [b"", b"{not json", b"[1]", b"\xff"])
def test_a_body_that_is_not_a_json_object_is_invalid_json_with_no_param(raw):
    with pytest.raises(InvalidInput) as caught:
        completion_request_parse(raw)
    assert caught.value.code == "invalid_json" and caught.value.param is None


def test_messages_over_the_character_limit_are_a_413(settings):
    settings.API_MAX_PROMPT_CHARS = 10
    with pytest.raises(PayloadTooLarge) as caught:
        _parse(ask(messages=[{"role": "user", "content": "x" * 11}]))
    assert (caught.value.status, caught.value.code) == (413, "prompt_too_long")
    assert caught.value.param == "messages"
