"""Streamed tool calls assemble to exactly the non-streamed ones: a property over
argument shapes and split points (hypothesis), through a real worker and the ASGI
app, and the official ``openai`` client's accumulation and stream helper."""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conversations.openai import schemas
from inference.engines.scripted import ScriptedEngine
from tests.conversations.openai.helpers import asgi, ask

pytestmark = pytest.mark.django_db(transaction=True)

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": name,
            "parameters": {"type": "object", "properties": {}},
        },
    }
    for name in ("lookup", "now")
]
# strings a call's arguments must carry unchanged: markup a template parser may
# look for, braces, multibyte characters (2, 3 and 4 UTF-8 bytes), escapes
TRICKY = st.sampled_from(
    ["</tool_call>", "{", "}", "{}", '"', "\\", "é", "日本", "🙂", "\n", "<|im_end|>"]
)
TEXT = st.lists(st.one_of(TRICKY, st.text(max_size=6)), max_size=4).map("".join)
ARGUMENTS = st.one_of(
    st.just("{}"),  # a tool without parameters: "{}", never dropped
    st.dictionaries(
        st.sampled_from(["q", "city", "code"]),
        st.one_of(TEXT, st.integers(), st.booleans()),
        max_size=3,
    ).map(lambda d: json.dumps(d, ensure_ascii=False)),
)


@st.composite
def scripted_calls(draw: Any) -> list[dict[str, Any]]:
    """One or two calls, each with its arguments cut at drawn byte lengths."""
    calls = []
    for index in range(draw(st.integers(1, 2))):
        arguments = draw(ARGUMENTS)
        size = len(arguments.encode())
        pieces = draw(st.lists(st.integers(0, max(size, 1)), max_size=5))
        calls.append(
            {
                "name": TOOLS[index]["function"]["name"],
                "arguments": arguments,
                "pieces": pieces,
                "id": f"call_{index}x",
            }
        )
    return calls


def _assembled(chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    calls: dict[int, dict[str, Any]] = {}
    for chunk in chunks:
        for choice in chunk["choices"]:
            for piece in choice["delta"].get("tool_calls", ()):
                if "id" in piece:
                    assert piece["index"] not in calls  # one first piece per call
                    calls[piece["index"]] = {
                        "id": piece["id"],
                        "type": piece["type"],
                        "function": dict(piece["function"]),
                    }
                else:
                    function = calls[piece["index"]]["function"]
                    function["arguments"] += piece["function"]["arguments"]
    return [calls[i] for i in sorted(calls)]


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(calls=scripted_calls(), text=st.sampled_from(["", "Let me look."]))
async def test_streamed_calls_assemble_to_the_non_streamed_ones(
    api_key, start_worker, calls, text
):
    engine = _engine(start_worker)
    engine.defaults.update(text=text, tool_calls=calls)
    body = ask(tools=TOOLS)
    whole = await asgi("POST", "/v1/chat/completions", body=body, key=api_key)
    streamed = await asgi(
        "POST", "/v1/chat/completions", body={**body, "stream": True}, key=api_key
    )
    completion = whole.json()
    schemas.validate_completion(completion)
    for data in streamed.data_lines:
        schemas.validate_stream_data(data)
    message = completion["choices"][0]["message"]
    expected = [
        {
            "id": c["id"],
            "type": "function",
            "function": {"name": c["name"], "arguments": c["arguments"]},
        }
        for c in calls
    ]
    assert message["tool_calls"] == expected
    assert message["content"] == (text or None)
    assert _assembled(streamed.chunks) == expected
    assert completion["choices"][0]["finish_reason"] == "tool_calls"
    assert streamed.chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


_ENGINES: dict[int, ScriptedEngine] = {}


def _engine(start_worker: Any) -> ScriptedEngine:
    """One worker for all the examples of a test (hypothesis reuses the fixtures)."""
    key = id(start_worker)
    if key not in _ENGINES:
        _ENGINES.clear()
        _ENGINES[key] = ScriptedEngine()
        start_worker(_ENGINES[key])
    return _ENGINES[key]


def _client(api_key: str) -> openai.AsyncOpenAI:
    from chatsite.asgi import application

    return openai.AsyncOpenAI(
        base_url="http://testserver/v1",
        api_key=api_key,
        max_retries=0,
        http_client=httpx.AsyncClient(transport=httpx.ASGITransport(app=application)),
    )


async def test_the_openai_client_parses_tool_calls_streamed_and_not(
    api_key, start_worker
):
    calls = [
        # cut inside "é" (2 bytes) and inside "🙂" (4 bytes)
        {"name": "lookup", "arguments": '{"q": "é🙂</tool_call>{}"}', "pieces": [8, 3]},
        {"name": "now", "arguments": "{}", "pieces": [1]},
    ]
    start_worker(ScriptedEngine(text="", tool_calls=calls))
    client = _client(api_key)
    messages = [{"role": "user", "content": "Look it up."}]
    completion = await client.chat.completions.create(
        model="default", messages=messages, tools=TOOLS
    )
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    expected = [(c["name"], c["arguments"]) for c in calls]
    got = [(t.function.name, t.function.arguments) for t in choice.message.tool_calls]
    assert got == expected

    stream = await client.chat.completions.create(
        model="default",
        messages=messages,
        tools=TOOLS,
        stream=True,
        stream_options={"include_usage": True},
    )
    pieces: dict[int, list[str]] = {}
    names: dict[int, str] = {}
    finish, usage = None, None
    async for chunk in stream:
        usage = chunk.usage or usage
        for c in chunk.choices:
            finish = c.finish_reason or finish
            for t in c.delta.tool_calls or ():
                if t.function.name:
                    names[t.index] = t.function.name
                pieces.setdefault(t.index, []).append(t.function.arguments or "")
    assert [(names[i], "".join(pieces[i])) for i in sorted(pieces)] == expected
    assert finish == "tool_calls"
    assert (
        usage is not None
        and usage.completion_tokens == completion.usage.completion_tokens
    )

    async with client.chat.completions.stream(
        model="default", messages=messages, tools=TOOLS
    ) as helper:
        final = await helper.get_final_completion()
    message = final.choices[0].message
    assert [
        (t.function.name, t.function.arguments) for t in message.tool_calls
    ] == expected
    assert [t.id for t in message.tool_calls] == [
        t.id for t in choice.message.tool_calls
    ]
    assert final.choices[0].finish_reason == "tool_calls"
