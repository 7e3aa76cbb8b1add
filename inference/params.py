"""Which generation parameters each engine implements: the one table.

A generation job's ``params`` (:class:`inference.protocol.Job`) hold the request's
parameters under their OpenAI names (``max_tokens`` for ``max_completion_tokens``
too). The gateway refuses, before anything is reserved or enqueued, a request whose
routed pool's engine does not implement one of them (:func:`params_unsupported`), so
no parameter is ever accepted and silently ignored. ``docs/api.md`` shows this table.

Values, as the API validates them (``conversations/openai/params.py``):
``max_tokens`` int >= 1; ``temperature`` 0..2; ``top_p`` 0..1; ``stop`` list of up to
4 strings; ``seed`` int; ``presence_penalty``/``frequency_penalty`` -2..2;
``logit_bias`` {token id (int as str): bias -100..100}; ``response_format``
``{"type": "json_object"}`` or ``{"type": "json_schema", "schema": {...}}``.

The scripted engine writes fixed text: ``temperature``, ``top_p`` and ``seed`` cannot
change it (it is deterministic), so they are accepted; ``stop`` cuts it. It emits
its scripted tool calls only when the job offers ``tools`` (``tool_choice`` "none":
none; a named function: only that one's; ``parallel_tool_calls`` false: the first).
"""

from __future__ import annotations

from collections.abc import Iterable

# Parameters every engine takes; engine options of our own (``script``, ``ignore_eos``,
# ``top_k``, ``repeat_penalty``, ``continue_final_message``) are set by the product
# itself, never by a client.
COMMON = frozenset({"max_tokens", "temperature", "top_p", "stop", "seed"})
# What llama.cpp (sampler, grammars), vLLM (SamplingParams, structured outputs) and an
# OpenAI-compatible server implement beyond COMMON.
SAMPLING = frozenset(
    {"presence_penalty", "frequency_penalty", "logit_bias", "response_format"}
)
# OpenAI tool calling (``tools``, ``tool_choice``, ``parallel_tool_calls``): an engine
# that implements them emits :class:`inference.engines.base.ToolCallDelta`.
TOOLS = frozenset({"tools", "tool_choice", "parallel_tool_calls"})
# ``continue_final_message`` true (vLLM's name; set by the chat's "Continue", never by a
# client): the job's messages end with an unfinished assistant message, and the model
# writes on from its last character (the chat template rendered with that message
# left open: no end of turn, no generation prompt), so the text it writes is that
# message's continuation. Every engine implements it (an OpenAI-compatible server gets
# vLLM's ``continue_final_message`` and ``add_generation_prompt: false``).
CONTINUE = "continue_final_message"
INTERNAL = frozenset({"script", "ignore_eos", "top_k", "repeat_penalty", CONTINUE})

# The ``error`` event code of a generation whose parameters its engine found invalid
# once running (a logit_bias token id outside the vocabulary, a JSON Schema llama.cpp
# cannot compile): the client's fault, a 400 (gateway/generations/outcome.py).
ERROR_INVALID_PARAMETER = "invalid_parameter"

ENGINE_PARAMS: dict[str, frozenset[str]] = {
    "llamacpp": COMMON | SAMPLING | TOOLS,
    "vllm": COMMON | SAMPLING | TOOLS,
    "openai": COMMON | SAMPLING | TOOLS,
    "scripted": COMMON | TOOLS,
}


def params_unsupported(*, engine: str, params: Iterable[str]) -> list[str]:
    """Return the names among ``params`` that ``engine`` does not implement, in order.

    Internal options (:data:`INTERNAL`) always pass. An engine not in
    :data:`ENGINE_PARAMS` implements :data:`COMMON` only.
    """
    known = ENGINE_PARAMS.get(engine, COMMON) | INTERNAL
    return [name for name in params if name not in known]
