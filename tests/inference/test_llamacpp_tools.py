"""Tool calling in the llama.cpp engine on the bundled SmolLM2-135M-Instruct GGUF."""

import asyncio
import json

import pytest

from inference.engines.base import Delta, EngineError, Finish, ToolCallDelta
from inference.engines.llamacpp import LlamaCppEngine
from inference.protocol import Job
from inference.tokens import prompt_counter
from inference.toolcalls import join

pytestmark = pytest.mark.slow

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 40},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "days": {"type": "integer"},
            },
            "required": ["city", "unit"],
        },
    },
}
NOW = {
    "type": "function",
    "function": {"name": "get_time", "description": "Get the current time."},
}
TOOLS = [WEATHER, NOW]
ASK = [{"role": "user", "content": "What's the weather like in Paris right now?"}]


@pytest.fixture(scope="module")
def engine():
    eng = LlamaCppEngine(n_ctx=1024, background_slot=False)
    asyncio.run(eng.start())
    return eng


def collect(engine, job):
    async def run():
        return [item async for item in engine.generate(job)]

    return asyncio.run(run())


def fits(arguments: str, schema: dict) -> bool:
    """The arguments are a JSON object of the schema's required keys and types."""
    value = json.loads(arguments)
    types = {"string": str, "integer": int, "object": dict}
    props = schema.get("properties", {})
    return (
        isinstance(value, dict)
        and set(schema.get("required", [])) <= set(value)
        and set(value) <= set(props)
        and all(isinstance(value[k], types[props[k]["type"]]) for k in value)
        and all(value[k] in props[k].get("enum", [value[k]]) for k in value)
    )


@pytest.mark.parametrize(
    ("choice", "seed"),
    [
        ("required", 1),
        ("required", 2),
        ({"type": "function", "function": {"name": "get_weather"}}, 3),
        ({"type": "function", "function": {"name": "get_time"}}, 4),
    ],
)
def test_required_and_named_choice_always_make_a_call_that_fits_the_schema(
    engine, choice, seed
):
    items = collect(
        engine,
        Job(
            job_id=f"req-{seed}",
            messages=ASK,
            params={
                "max_tokens": 80,
                "temperature": 1.0,
                "seed": seed,
                "tools": TOOLS,
                "tool_choice": choice,
                "parallel_tool_calls": False,
            },
        ),
    )
    finish = items[-1]
    assert finish.finish_reason == "tool_calls"
    content, calls = join(items[:-1])
    assert content == ""
    assert len(calls) == 1
    assert calls[0].id.startswith("call_")
    if isinstance(choice, dict):
        assert calls[0].name == choice["function"]["name"]
    if calls[0].name == "get_time":
        assert calls[0].arguments == "{}"  # no parameters: an empty object
    else:
        assert fits(calls[0].arguments, WEATHER["function"]["parameters"])
    assert finish.usage.prompt_tokens == engine.count_tokens(ASK, tools=TOOLS)


def test_the_streamed_pieces_join_to_the_same_arguments_for_the_same_seed(engine):
    params = {
        "max_tokens": 80,
        "temperature": 1.0,
        "seed": 11,
        "tools": [WEATHER],
        "tool_choice": "required",
    }
    first = collect(engine, Job(job_id="s1", messages=ASK, params=params))
    again = collect(engine, Job(job_id="s2", messages=ASK, params=params))
    assert first[-1].finish_reason == "tool_calls"
    pieces = [i for i in first if isinstance(i, ToolCallDelta)]
    assert pieces[0].id and pieces[0].name == "get_weather"
    assert pieces[0].arguments == ""
    assert len(pieces) > 3  # the arguments stream token by token
    _, calls = join(first[:-1])
    _, calls_again = join(again[:-1])
    assert [c.arguments for c in calls] == [c.arguments for c in calls_again]
    assert fits(calls[0].arguments, WEATHER["function"]["parameters"])


def test_auto_lets_the_model_answer_in_text_and_none_does_not_offer_the_tools(engine):
    # SmolLM2-135M answers this in text (it does not choose tools on its own): the
    # text streams as content, and no call means finish "stop" or "length"
    params = {"max_tokens": 24, "temperature": 0, "tools": TOOLS}
    items = collect(engine, Job(job_id="auto", messages=ASK, params=params))
    content, calls = join(items[:-1])
    assert calls == [] and content.strip()
    assert sum(isinstance(i, Delta) for i in items) > 3
    assert items[-1].finish_reason in {"stop", "length"}
    assert items[-1].usage.prompt_tokens == engine.count_tokens(ASK, tools=TOOLS)
    # the web tier's count (a vocabulary-only load) includes the tools too
    assert prompt_counter("llamacpp")(ASK, tools=TOOLS) == items[-1].usage.prompt_tokens

    none = {**params, "tool_choice": "none"}
    items = collect(engine, Job(job_id="none", messages=ASK, params=none))
    assert items[-1].usage.prompt_tokens == engine.count_tokens(ASK)
    assert engine.count_tokens(ASK, tools=TOOLS) > engine.count_tokens(ASK) + 50
    assert engine.count_tokens(ASK, tools=TOOLS, tool_choice="none") == (
        engine.count_tokens(ASK)
    )


def test_a_tool_result_comes_back_and_the_model_answers_in_text(engine):
    call = {
        "id": "call_abc",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
    }
    messages = [
        *ASK,
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_abc", "content": "Sunny, 21 °C."},
    ]
    params = {"max_tokens": 40, "temperature": 0, "tools": TOOLS}
    items = collect(engine, Job(job_id="result", messages=messages, params=params))
    content, calls = join(items[:-1])
    assert calls == [] and content.strip()
    assert items[-1].finish_reason in {"stop", "length"}
    prompt = engine.count_tokens(messages, tools=TOOLS)
    assert items[-1].usage.prompt_tokens == prompt
    assert prompt > engine.count_tokens(ASK, tools=TOOLS) + 15  # call and result in it


def test_a_named_function_not_among_the_tools_is_refused(engine):
    params = {
        "max_tokens": 120,
        "temperature": 0,
        "tools": TOOLS,
        "tool_choice": {"type": "function", "function": {"name": "send_email"}},
    }
    with pytest.raises(EngineError) as exc:
        collect(engine, Job(job_id="bad", messages=ASK, params=params))
    assert exc.value.code == "invalid_parameter"


@pytest.mark.parametrize(
    "parameters",
    [
        {"type": "object", "properties": {"v": {"enum": ['a"b']}}},
        {"type": "object", "properties": {'we"ird': {"type": "string"}}},
        {"type": "object", "properties": {"s": {"type": "string", "maxLength": 9000}}},
    ],
    ids=["quote in an enum value", "quote in a property name", "huge repetition"],
)
def test_a_schema_llama_cpp_refuses_is_an_invalid_parameter_not_a_crash(
    engine, parameters
):
    # llama.cpp turns such a grammar into a NULL sampler; used unchecked, the worker
    # process died with SIGSEGV on the first token (and again on the retry)
    tool = {"type": "function", "function": {"name": "pick", "parameters": parameters}}
    params = {"max_tokens": 8, "tools": [tool], "tool_choice": "required"}
    with pytest.raises(EngineError) as exc:
        collect(engine, Job(job_id="refused", messages=ASK, params=params))
    assert exc.value.code == "invalid_parameter"
    # the slot is still usable
    items = collect(engine, Job(job_id="after", messages=ASK, params={"max_tokens": 4}))
    assert isinstance(items[-1], Finish)


def test_a_call_cut_by_max_tokens_finishes_length(engine):
    params = {
        "max_tokens": 6,
        "temperature": 0,
        "tools": [WEATHER],
        "tool_choice": "required",
    }
    items = collect(engine, Job(job_id="cut", messages=ASK, params=params))
    assert isinstance(items[-1], Finish)
    assert items[-1].finish_reason == "length"


# the tool parts of Qwen2.5's chat template (Hermes format), abridged
HERMES_TEMPLATE = (
    "{% if tools %}<|im_start|>system\n<tools>"
    "{% for tool in tools %}\n{{ tool | tojson }}{% endfor %}\n</tools><|im_end|>\n"
    "{% endif %}"
    "{% for m in messages %}{% if m.role == 'assistant' and m.tool_calls %}"
    "<|im_start|>assistant\n{{ m.content }}"
    "{% for c in m.tool_calls %}<tool_call>\n"
    '{"name": "{{ c.function.name }}", "arguments": '
    "{{ c.function.arguments | tojson }}}\n</tool_call>{% endfor %}<|im_end|>\n"
    "{% elif m.role == 'tool' %}<|im_start|>user\n<tool_response>\n{{ m.content }}"
    "\n</tool_response><|im_end|>\n"
    "{% else %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endif %}"
    "{% endfor %}<|im_start|>assistant\n"
)


def test_a_template_that_renders_tools_itself_is_given_them():
    from llama_cpp import Llama

    from inference.engines.llamacpp_prompt import ChatPrompt, bundled_model_path

    llm = Llama(model_path=str(bundled_model_path()), vocab_only=True, verbose=False)
    try:
        llm.metadata["tokenizer.chat_template"] = HERMES_TEMPLATE
        chat = ChatPrompt(llm)
        assert chat.native_tools
        call = {
            "id": "call_1",
            "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
        }
        messages = [
            *ASK,
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_1", "content": "Sunny."},
        ]
        prompt = chat.render(messages, tools=[WEATHER])
    finally:
        llm.close()
    assert '<tools>{"type": "function", "function": {"name": "get_weather"' in prompt
    # the arguments string became the object the template expects (not a JSON string)
    assert '{"name": "get_weather", "arguments": {"city": "Paris"}}' in prompt
    assert "<tool_response>\nSunny.\n</tool_response>" in prompt
    assert "None" not in prompt


def test_the_next_step_of_a_tool_exchange_reuses_the_kv_prefix(engine):
    # above temperature 0 (at 0 the prompt is evaluated whole): the tools sit in the
    # system message at the start, so the step after a call prefills only the call
    # and its result
    params = {"max_tokens": 4, "temperature": 0.7, "tools": TOOLS}
    first = collect(engine, Job(job_id="step-1", messages=ASK, params=params))
    call = {
        "id": "call_abc",
        "type": "function",
        "function": {"name": "get_time", "arguments": "{}"},
    }
    messages = [
        *ASK,
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_abc", "content": "12:00"},
    ]
    second = collect(engine, Job(job_id="step-2", messages=messages, params=params))
    assert second[-1].usage.cached_tokens >= first[-1].usage.prompt_tokens - 2


TREE = {
    "type": "object",
    "properties": {"root": {"$ref": "#/$defs/node"}},
    "required": ["root"],
    "$defs": {
        "node": {
            "type": "object",
            "properties": {
                "label": {"type": "string", "maxLength": 8},
                "child": {"$ref": "#/$defs/node"},
            },
            "required": ["label"],
        }
    },
}


def test_a_schema_with_defs_and_a_recursive_ref_makes_a_call_that_fits(engine):
    """A tool's own ``#/$defs/...`` (recursive here) resolves, though the schema is
    nested in the call's grammar (inference/engines/llamacpp_grammar.py hoists it)."""
    import jsonschema

    tool = {"type": "function", "function": {"name": "tree", "parameters": TREE}}
    other = {
        "type": "function",
        "function": {
            "name": "pick",
            "parameters": {
                "type": "object",
                "properties": {"n": {"$ref": "#/definitions/node"}},
                "definitions": {"node": {"type": "integer"}},
            },
        },
    }
    params = {"max_tokens": 120, "temperature": 0, "tools": [tool, other]}
    params["tool_choice"] = {"type": "function", "function": {"name": "tree"}}
    items = collect(engine, Job(job_id="tree", messages=ASK, params=params))
    assert items[-1].finish_reason == "tool_calls"
    _, [call] = join(items[:-1])
    assert call.name == "tree"
    jsonschema.validate(json.loads(call.arguments), TREE)


def test_a_ref_to_the_whole_schema_is_refused_in_the_clients_words(engine):
    parameters = {"type": "object", "properties": {"again": {"$ref": "#"}}}
    tool = {"type": "function", "function": {"name": "loop", "parameters": parameters}}
    params = {"max_tokens": 8, "tools": [tool], "tool_choice": "required"}
    with pytest.raises(EngineError) as exc:
        collect(engine, Job(job_id="loop", messages=ASK, params=params))
    assert exc.value.code == "invalid_parameter"
    message = str(exc.value)
    assert message.startswith("tools: a `$ref`") and "$defs" in message
    assert "stdin" not in message and "{" not in message  # no internals
