"""Every object the API emits matches its schema (conversations/openai/schemas.py):
real requests through the views, streamed and not, answers and errors; and the
validator rejects what does not."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from conversations.openai import schemas
from inference.engines.scripted import ScriptedEngine
from tests.conversations.openai.helpers import asgi, ask

pytestmark = pytest.mark.django_db(transaction=True)


def _stream_kinds(data_lines: list[str]) -> list[str]:
    """Validate each ``data:`` payload; return their kinds in order."""
    return [schemas.validate_stream_data(data) for data in data_lines]


async def test_streamed_chunks_the_usage_chunk_and_done_match_their_schemas(
    api_key, start_worker
):
    start_worker(ScriptedEngine())
    for options in ({"stream_options": {"include_usage": True}}, {}):
        result = await asgi(
            "POST",
            "/v1/chat/completions",
            body=ask(stream=True, **options),
            key=api_key,
        )
        assert result.status == 200, result.body
        kinds = _stream_kinds(result.data_lines)
        usage = ["usage_chunk"] if options else []
        assert kinds == ["chunk"] * (len(kinds) - 1 - len(usage)) + usage + ["done"]
        assert len(kinds) > 3


async def test_a_completion_and_the_models_list_match_their_schemas(
    api_key, start_worker
):
    start_worker(ScriptedEngine())
    completion = await asgi("POST", "/v1/chat/completions", body=ask(), key=api_key)
    assert completion.status == 200, completion.body
    schemas.validate_completion(completion.json())
    cut = await asgi(
        "POST", "/v1/chat/completions", body=ask(max_tokens=2), key=api_key
    )
    schemas.validate_completion(cut.json())
    models = await asgi("GET", "/v1/models", key=api_key)
    assert models.status == 200
    schemas.validate_model_list(models.json())


async def test_error_bodies_and_a_failed_streams_error_object_match_the_schema(
    api_key, start_worker
):
    errors = [
        await asgi("POST", "/v1/chat/completions", body=ask(), key="sk-wrong"),
        await asgi("GET", "/v1/models", key=None),
        await asgi("POST", "/v1/chat/completions", body=ask(n=2), key=api_key),
        await asgi("POST", "/v1/chat/completions", body={"model": "x"}, key=api_key),
        await asgi("GET", "/v1/chat/completions", key=api_key),
        await asgi("POST", "/v1/chat/completions", body=ask(), key=api_key),  # 503
    ]
    assert [e.status for e in errors] == [401, 401, 400, 400, 405, 503]
    for error in errors:
        schemas.validate_error(error.json())
    assert errors[2].json()["error"]["param"] == "n"
    assert errors[3].json()["error"]["param"] == "messages"

    start_worker(ScriptedEngine(text="one two three", fail_after=2))
    failed = await asgi(
        "POST", "/v1/chat/completions", body=ask(stream=True), key=api_key
    )
    # the role chunk, the text (its two deltas in one or two chunks: the gateway
    # coalesces what one read brings), then the error object
    kinds = _stream_kinds(failed.data_lines)
    assert kinds[0] == "chunk" and kinds[-1] == "error"
    assert kinds[1:-1] in (["chunk"], ["chunk", "chunk"])
    text = "".join(
        json.loads(line)["choices"][0]["delta"].get("content", "")
        for line in failed.data_lines[1:-1]
    )
    assert text == "one two"


CHUNK: dict[str, Any] = {
    "id": "chatcmpl-0123abcd",
    "object": "chat.completion.chunk",
    "created": 1700000000,
    "model": "scripted-1",
    "system_fingerprint": None,
    "choices": [
        {
            "index": 0,
            "delta": {"content": "Hi"},
            "logprobs": None,
            "finish_reason": None,
        }
    ],
}


def _without(obj: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if k != key}


def _changed(path: list[Any], value: Any) -> dict[str, Any]:
    """CHUNK with the field at ``path`` set to ``value``."""
    obj = copy.deepcopy(CHUNK)
    target: Any = obj
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    return obj


def test_the_validator_accepts_a_well_formed_chunk():
    schemas.validate_chunk(CHUNK)
    schemas.validate_chunk(_changed(["usage"], None))


@pytest.mark.parametrize(
    ("chunk", "named"),
    [
        (_without(CHUNK, "id"), "missing field 'id'"),
        (_changed(["object"], "chat.completion"), "'object'"),
        (_changed(["created"], "1700000000"), "'created'"),
        (_changed(["created"], True), "'created'"),
        (_changed(["choices"], []), "'choices'"),
        (_changed(["choices", 0, "delta", "content"], 3), "'content'"),
        (_changed(["choices", 0, "delta", "role"], "user"), "'role'"),
        (_changed(["choices", 0, "finish_reason"], "done"), "'finish_reason'"),
        (_changed(["choices", 0, "delta", "tool"], "x"), "unexpected fields"),
        (_changed(["usage"], {"total_tokens": 1}), "'usage'"),
        (_changed(["id"], "cmpl-1"), "'id'"),
    ],
)
def test_the_validator_rejects_a_malformed_chunk(chunk, named):
    with pytest.raises(ValueError, match=named):
        schemas.validate_chunk(chunk)


def test_the_validator_rejects_a_usage_chunk_whose_total_is_not_the_sum():
    usage = {
        "prompt_tokens": 3,
        "completion_tokens": 2,
        "total_tokens": 6,
        "prompt_tokens_details": {"cached_tokens": 0},
    }
    chunk = {**_without(CHUNK, "choices"), "choices": [], "usage": usage}
    with pytest.raises(ValueError, match="inconsistent"):
        schemas.validate_usage_chunk(chunk)
    schemas.validate_usage_chunk({**chunk, "usage": {**usage, "total_tokens": 5}})
