"""The scripted engine's tool calls (inference/engines/scripted.py): emitted only when
the job offers tools, cut at the scripted byte lengths as an engine's decoder would,
and limited by ``tool_choice`` and ``parallel_tool_calls``."""

from __future__ import annotations

import asyncio
from typing import Any

from inference import protocol
from inference.engines.base import Delta, Finish, ToolCallDelta
from inference.engines.scripted import ScriptedEngine
from inference.jobs import ToolCalls
from inference.protocol import Job

TOOLS = [{"type": "function", "function": {"name": n}} for n in ("a", "b")]
CALLS = [
    # "é" is 2 bytes: the cut at 8 falls inside it; the 0-byte piece is empty
    {"name": "a", "arguments": '{"x": "é"}', "pieces": [8, 0]},
    {"name": "b", "arguments": "{}"},
]


def _run(params: dict[str, Any], text: str = "") -> list[Any]:
    engine = ScriptedEngine(text=text, tool_calls=CALLS)
    job = Job(job_id="j", messages=[{"role": "user", "content": "hi"}], params=params)

    async def collect() -> list[Any]:
        return [item async for item in engine.generate(job)]

    return asyncio.run(collect())


def _assemble(items: list[Any]) -> list[dict[str, Any]]:
    calls = ToolCalls()
    for item in items:
        if isinstance(item, ToolCallDelta):
            calls.add(
                {
                    "index": item.index,
                    "id": item.id,
                    "name": item.name,
                    "arguments_delta": item.arguments,
                }
            )
    return calls.calls()


def test_calls_are_cut_at_byte_lengths_and_a_split_character_waits():
    items = _run({"tools": TOOLS}, text="Sure.")
    assert items[0] == Delta("Sure.")
    pieces = [i for i in items if isinstance(i, ToolCallDelta)]
    assert [(p.index, p.arguments, p.id, p.name) for p in pieces] == [
        (0, '{"x": "', "call_scripted0", "a"),
        # the held byte of "é" completes in the next piece; the empty one is not sent
        (0, 'é"}', None, None),
        (1, "{}", "call_scripted1", "b"),
    ]
    assert [c["function"]["arguments"] for c in _assemble(items)] == [
        '{"x": "é"}',
        "{}",
    ]
    finish = items[-1]
    assert isinstance(finish, Finish)
    assert finish.finish_reason == protocol.FINISH_TOOL_CALLS
    assert finish.usage.completion_tokens == 1 + len(pieces)


def test_no_tools_offered_or_choice_none_makes_no_call():
    for params in ({}, {"tools": TOOLS, "tool_choice": "none"}):
        items = _run(params, text="Plain answer.")
        assert not any(isinstance(i, ToolCallDelta) for i in items)
        assert items[-1].finish_reason == protocol.FINISH_STOP


def test_a_named_choice_and_no_parallel_calls_limit_the_calls():
    named = _run(
        {"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "b"}}}
    )
    assert [c["function"]["name"] for c in _assemble(named)] == ["b"]
    assert _assemble(named)[0]["id"] == "call_scripted0"  # renumbered from 0
    single = _run({"tools": TOOLS, "parallel_tool_calls": False})
    assert [c["function"]["name"] for c in _assemble(single)] == ["a"]


def test_call_text_replaces_the_text_before_calls_only():
    engine = ScriptedEngine(
        text="The answer.", tool_calls=CALLS, call_text="Let me run it."
    )

    def texts(params: dict[str, Any]) -> str:
        job = Job(
            job_id="j", messages=[{"role": "user", "content": "hi"}], params=params
        )

        async def collect() -> list[Any]:
            return [item async for item in engine.generate(job)]

        items = asyncio.run(collect())
        return "".join(i.text for i in items if isinstance(i, Delta))

    assert texts({"tools": TOOLS}) == "Let me run it."
    assert texts({}) == "The answer."
