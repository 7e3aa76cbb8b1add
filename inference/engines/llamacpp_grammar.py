"""Grammars that hold a llama.cpp answer to a shape: ``response_format`` (JSON, or a
JSON Schema) and tool calls (``<tool_call>`` blocks whose arguments fit the tools'
JSON Schemas), built with llama-cpp-python's JSON-Schema converter and checked with
llama.cpp's own parser before sampling (:func:`grammar_check`).
"""

from __future__ import annotations

import json
from typing import Any

from inference.engines.base import EngineError
from inference.params import ERROR_INVALID_PARAMETER

_LOOSE_CHAR = r'char ::= [^"\\]'
_JSON_CHAR = r'char ::= [^"\\\x7F\x00-\x1F]'


def response_format_grammar(response_format: dict[str, Any] | None) -> Any:
    """Return the llama.cpp grammar that holds the answer to ``response_format``
    (``json_object``: any JSON object; ``json_schema``: that schema), or None.
    Raises EngineError (``invalid_parameter``) for a schema llama.cpp cannot compile."""
    if not response_format:
        return None
    from llama_cpp.llama_grammar import JSON_GBNF, LlamaGrammar, json_schema_to_gbnf

    try:
        if response_format.get("type") == "json_schema":
            gbnf = json_schema_to_gbnf(json.dumps(response_format["schema"]))
            # its string rule lets control characters (a raw newline) into strings,
            # which no JSON parser accepts: JSON_GBNF's rule does not
            gbnf = gbnf.replace(_LOOSE_CHAR, _JSON_CHAR, 1)
            return LlamaGrammar.from_string(gbnf, verbose=False)
        return LlamaGrammar.from_string(JSON_GBNF, verbose=False)
    except Exception as exc:  # noqa: BLE001 - the schema's fault, told to the client
        raise EngineError(
            f"response_format: the JSON Schema cannot be turned into a grammar: {exc}",
            code=ERROR_INVALID_PARAMETER,
        ) from exc


def grammar_check(llm: Any, grammar: Any) -> None:
    """Parse ``grammar`` with llama.cpp's own parser before sampling with it.

    llama-cpp-python adds the parsed sampler to the chain unchecked: a grammar that
    llama.cpp refuses (a literal it cannot read, a rule it cannot expand) becomes a
    NULL sampler and the worker process dies (SIGSEGV) on its first token. Raises
    EngineError (``invalid_parameter``: the schema is the client's) instead.
    """
    import llama_cpp

    sampler = llama_cpp.llama_sampler_init_grammar(
        llm._model.vocab,
        grammar._grammar.encode("utf-8"),
        grammar._root.encode("utf-8"),
    )
    if not sampler:
        raise EngineError(
            "The JSON Schema cannot be turned into a grammar this engine accepts "
            "(llama.cpp refused it).",
            code=ERROR_INVALID_PARAMETER,
        )
    llama_cpp.llama_sampler_free(sampler)


MAX_PARALLEL_CALLS = 4


def _call_schema(tool: dict[str, Any]) -> dict[str, Any]:
    function = tool["function"]
    parameters = function.get("parameters") or {}
    if not parameters.get("properties") and not parameters.get("additionalProperties"):
        parameters = {"const": {}}  # no parameters: exactly "{}"
    return {
        "type": "object",
        "properties": {"name": {"const": function["name"]}, "arguments": parameters},
        "required": ["name", "arguments"],
    }


def tools_grammar(
    tools: list[dict[str, Any]], *, name: str | None, parallel: bool
) -> Any:
    """Return the grammar of an answer that is only tool calls: one (or, with
    ``parallel``, up to :data:`MAX_PARALLEL_CALLS`) ``<tool_call>`` blocks, each a JSON
    object ``{"name": ..., "arguments": ...}`` whose arguments fit that tool's JSON
    Schema; only the tool ``name`` if given. Raises EngineError
    (``invalid_parameter``) for an unknown name or a schema llama.cpp cannot compile."""
    from llama_cpp.llama_grammar import LlamaGrammar, json_schema_to_gbnf

    chosen = [t for t in tools if name is None or t["function"]["name"] == name]
    if not chosen:
        raise EngineError(
            f"tool_choice names the function {name!r}, which is not among the tools.",
            code=ERROR_INVALID_PARAMETER,
        )
    schemas = [_call_schema(t) for t in chosen]
    schema = schemas[0] if len(schemas) == 1 else {"anyOf": schemas}
    try:
        gbnf = json_schema_to_gbnf(json.dumps(schema))
        gbnf = gbnf.replace(_LOOSE_CHAR, _JSON_CHAR, 1)
        gbnf = gbnf.replace("root ::=", "tool-call-object ::=", 1)
        block = r'"<tool_call>\n" tool-call-object "\n</tool_call>"'
        more = f' ("\\n" {block}){{0,{MAX_PARALLEL_CALLS - 1}}}' if parallel else ""
        gbnf = f"root ::= {block}{more}\n{gbnf}"
        return LlamaGrammar.from_string(gbnf, verbose=False)
    except Exception as exc:  # noqa: BLE001 - the schema's fault, told to the client
        raise EngineError(
            f"tools: a function's JSON Schema cannot be turned into a grammar: {exc}",
            code=ERROR_INVALID_PARAMETER,
        ) from exc
