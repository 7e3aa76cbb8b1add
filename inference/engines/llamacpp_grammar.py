"""Grammars that hold a llama.cpp answer to a shape: ``response_format`` (JSON, or a
JSON Schema) and tool calls (``<tool_call>`` blocks whose arguments fit the tools'
JSON Schemas), built with llama-cpp-python's JSON-Schema converter and checked with
llama.cpp's own parser before sampling (:func:`grammar_check`).
"""

from __future__ import annotations

import json
import re
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


_DEFS_KEYS = ("$defs", "definitions")


def _hoisted(
    parameters: dict[str, Any], prefix: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Return ``parameters`` without its ``$defs``/``definitions`` and those
    definitions, renamed ``<prefix><key>-<name>``, with every ``$ref`` into them
    rewritten to the new name under the root's ``$defs``.

    A tool's schema is nested in the call's schema (``arguments``), where its own
    ``#/$defs/...`` references would point at the wrong root: llama-cpp-python's
    converter resolves them from the grammar's root only.
    """

    def renamed(ref: str) -> str:
        for key in _DEFS_KEYS:
            head = f"#/{key}/"
            if ref.startswith(head):
                return f"#/$defs/{prefix}{key.strip('$')}-{ref[len(head) :]}"
        return ref

    def rewrite(node: Any) -> Any:
        if isinstance(node, dict):
            out = {k: rewrite(v) for k, v in node.items()}
            if isinstance(node.get("$ref"), str):
                out["$ref"] = renamed(node["$ref"])
            return out
        if isinstance(node, list):
            return [rewrite(v) for v in node]
        return node

    defs: dict[str, Any] = {}
    for key in _DEFS_KEYS:
        found = parameters.get(key)
        if isinstance(found, dict):
            for name, sub in found.items():
                defs[f"{prefix}{key.strip('$')}-{name}"] = rewrite(sub)
    body = {k: v for k, v in parameters.items() if k not in _DEFS_KEYS}
    return rewrite(body), defs


def _call_schema(tool: dict[str, Any], index: int = 0) -> dict[str, Any]:
    """The JSON Schema of one call of ``tool`` (``{"name", "arguments"}``); its
    definitions are hoisted to the returned schema's ``$defs`` (:func:`_hoisted`)."""
    function = tool["function"]
    parameters = function.get("parameters") or {}
    if not parameters.get("properties") and not parameters.get("additionalProperties"):
        parameters = {"const": {}}  # no parameters: exactly "{}"
    arguments, defs = _hoisted(parameters, f"t{index}-")
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {"name": {"const": function["name"]}, "arguments": arguments},
        "required": ["name", "arguments"],
    }
    if defs:
        schema["$defs"] = defs
    return schema


def _schema_problem(exc: BaseException) -> str:
    """The client's words for why a tool's JSON Schema has no grammar."""
    if isinstance(exc, RecursionError):
        return "a function's JSON Schema nests too deeply to be turned into a grammar."
    if "ref" in str(exc).lower():
        return (
            "a `$ref` in a function's JSON Schema cannot be followed: only references "
            "into the schema's own `$defs` or `definitions` are supported (not `#` "
            "itself, other paths or other documents)."
        )
    detail = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
    return f"a function's JSON Schema cannot be turned into a grammar ({detail})."


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
    schemas = [_call_schema(t, i) for i, t in enumerate(chosen)]
    defs = {k: v for one in schemas for k, v in one.pop("$defs", {}).items()}
    schema = schemas[0] if len(schemas) == 1 else {"anyOf": schemas}
    if defs:
        schema = {**schema, "$defs": defs}
    try:
        gbnf = json_schema_to_gbnf(json.dumps(schema))
        gbnf = gbnf.replace(_LOOSE_CHAR, _JSON_CHAR, 1)
        # the converter's own root rule (a line of its own: "arguments-root ::="
        # is a property's rule)
        gbnf = re.sub(r"^root ::=", "tool-call-object ::=", gbnf, count=1, flags=re.M)
        block = r'"<tool_call>\n" tool-call-object "\n</tool_call>"'
        more = f' ("\\n" {block}){{0,{MAX_PARALLEL_CALLS - 1}}}' if parallel else ""
        gbnf = f"root ::= {block}{more}\n{gbnf}"
        return LlamaGrammar.from_string(gbnf, verbose=False)
    except Exception as exc:  # noqa: BLE001 - the schema's fault, told to the client
        raise EngineError(
            f"tools: {_schema_problem(exc)}", code=ERROR_INVALID_PARAMETER
        ) from exc
