"""A generation's tool calls on its outcome (gateway/generations/outcome.py): the
``tool_call`` events folded into OpenAI's calls, where a service (the API, a tool
loop) reads them; ``finish_reason`` ``tool_calls`` settles as a complete answer."""

from __future__ import annotations

import json

from gateway.generations import outcome_from_events
from gateway.generations.outcome import outcome_filtered
from inference import protocol
from inference.protocol import Event


def _events(*fields: dict[str, str]) -> list[Event]:
    return [
        Event(id=f"{i}-0", type=f["e"], data=json.loads(f["d"]))
        for i, f in enumerate(fields, start=1)
    ]


DONE = protocol.event_fields(
    protocol.EVENT_DONE,
    {
        "finish_reason": protocol.FINISH_TOOL_CALLS,
        "usage": {"prompt_tokens": 5, "completion_tokens": 4, "cached_tokens": 0},
        "ttft_ms": 3,
        "latency_ms": 9,
    },
)


def test_the_outcome_holds_the_calls_assembled_in_index_order():
    events = _events(
        protocol.token_fields("Checking."),
        protocol.tool_call_fields(index=0, id="call_a", name="f", arguments_delta=""),
        protocol.tool_call_fields(index=1, id="call_b", name="g", arguments_delta="{"),
        protocol.tool_call_fields(index=0, arguments_delta='{"q": "日'),
        protocol.tool_call_fields(index=0, arguments_delta='本"}'),
        protocol.tool_call_fields(index=1, arguments_delta="}"),
        DONE,
    )
    outcome = outcome_from_events(events, model="m")
    assert outcome.text == "Checking."
    assert (outcome.status, outcome.openai_finish_reason) == ("complete", "tool_calls")
    assert outcome.tool_calls == [
        {
            "id": "call_a",
            "type": "function",
            "function": {"name": "f", "arguments": '{"q": "日本"}'},
        },
        {
            "id": "call_b",
            "type": "function",
            "function": {"name": "g", "arguments": "{}"},
        },
    ]
    assert outcome.usage.completion_tokens == 4


def test_a_plain_answer_and_a_cut_one_have_no_calls():
    plain = _events(
        protocol.token_fields("Hi."),
        protocol.event_fields(
            protocol.EVENT_DONE,
            {
                "finish_reason": "stop",
                "usage": {
                    "prompt_tokens": 1,
                    "completion_tokens": 1,
                    "cached_tokens": 0,
                },
                "ttft_ms": 1,
                "latency_ms": 1,
            },
        ),
    )
    assert outcome_from_events(plain).tool_calls == []
    called = outcome_from_events(
        _events(
            protocol.tool_call_fields(
                index=0, id="call_a", name="f", arguments_delta="{}"
            ),
            DONE,
        )
    )
    assert outcome_filtered(called, released="").tool_calls == []
