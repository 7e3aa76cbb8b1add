"""The vLLM engine's tool calling and structured outputs: the constraint for
``response_format``, the tools as vLLM's server takes them, the whitespace-free JSON
layout that keeps streamed arguments equal to the non-streamed parse, and
:class:`ToolSession` (one generation's request and its streaming tool parser).
"""

from __future__ import annotations

import json
from typing import Any

from inference.engines.base import Delta, EngineError, ToolCallDelta
from inference.params import ERROR_INVALID_PARAMETER
from inference.protocol import Job

EMPTY_PARAMETERS = {"type": "object", "properties": {}}


def structured_outputs(response_format: dict[str, Any] | None) -> Any:
    """Return vLLM's structured-output constraint for ``response_format`` (None: none):
    any JSON object for ``json_object``, the schema for ``json_schema``."""
    if not response_format:
        return None
    from vllm.sampling_params import StructuredOutputsParams

    if response_format.get("type") == "json_schema":
        return StructuredOutputsParams(json=response_format["schema"])
    return StructuredOutputsParams(json_object=True)


def tools_normalised(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Return ``tools`` with an empty-object schema for a function without
    ``parameters`` (its call then has arguments ``"{}"``, not any JSON value)."""
    out = []
    for tool in tools:
        fn = tool.get("function") or {}
        if fn.get("parameters") is None:
            tool = {**tool, "function": {**fn, "parameters": EMPTY_PARAMETERS}}
        out.append(tool)
    return out


def response_format_openai(response_format: dict[str, Any]) -> dict[str, Any]:
    """Return a job's ``response_format`` in the OpenAI shape vLLM's request takes."""
    if response_format.get("type") == "json_schema":
        return {
            "type": "json_schema",
            "json_schema": {"name": "response", "schema": response_format["schema"]},
        }
    return {"type": "json_object"}


def json_layout_exact(node: Any) -> Any:
    """Return a structural-tag tree whose JSON-Schema contents allow no free
    whitespace: ``", "`` and ``": "`` between items, nothing else (``json.dumps``'s
    layout, which vLLM's non-streamed parse writes the arguments in).

    xgrammar's structural tags otherwise allow any whitespace inside a call's JSON: a
    small model then writes newlines and indentation until it runs out of tokens, and
    the streamed arguments differ from the non-streamed ones by their whitespace.
    """
    if isinstance(node, list):
        return [json_layout_exact(item) for item in node]
    if not isinstance(node, dict):
        return node
    if node.get("type") == "json_schema" and node.get("style", "json") == "json":
        from xgrammar import Grammar

        schema = json.dumps(node["json_schema"])
        grammar = Grammar.from_json_schema(schema, any_whitespace=False)
        return {"type": "grammar", "grammar": str(grammar)}
    return {key: json_layout_exact(value) for key, value in node.items()}


class ToolSession:
    """One generation's tool calling: the vLLM request and its streaming parser.

    ``request`` is the adjusted ``ChatCompletionRequest`` (its ``structured_outputs``
    hold the call constraint); :meth:`feed` turns each output delta into text and
    :class:`ToolCallDelta` pieces; ``called`` is True once a call has started.
    """

    def __init__(self, *, parser: Any, request: Any, prompt_tokens: list[int]):
        self.parser = parser
        self.request = request
        self.prompt_tokens = prompt_tokens
        self.single = request.parallel_tool_calls is False
        self.called = False

    def feed(
        self, *, text: str, token_ids: list[int], finished: bool
    ) -> list[Delta | ToolCallDelta]:
        """Return the pieces of one output delta (``text``/``token_ids`` new this
        step; ``finished`` on the last one), in order: text first, then calls."""
        message = self.parser.parse_delta(
            delta_text=text,
            delta_token_ids=token_ids,
            request=self.request,
            prompt_token_ids=self.prompt_tokens,
            finished=finished,
        )
        out: list[Delta | ToolCallDelta] = []
        if message is None:
            return out
        if message.content:
            out.append(Delta(message.content))
        for call in message.tool_calls or []:
            if self.single and call.index > 0:
                continue  # as vLLM's server: parallel_tool_calls=false keeps one
            fn = call.function
            name = fn.name if fn is not None else None
            arguments = (fn.arguments if fn is not None else None) or ""
            if call.id is None and not arguments:
                continue
            call_id = None
            if call.id is not None:
                call_id = "call_" + call.id.removeprefix("chatcmpl-tool-")
                self.called = True
            out.append(
                ToolCallDelta(
                    index=call.index, arguments=arguments, id=call_id, name=name
                )
            )
        return out


def tool_session_start(
    *, model: str, parser_cls: Any, tokenizer: Any, job: Job, prompt_tokens: list[int]
) -> ToolSession | None:
    """Return the job's :class:`ToolSession` (None when it offers no tools).

    Builds vLLM's ``ChatCompletionRequest`` from the job as vLLM's OpenAI server
    does and lets the tool parser adjust it (structured outputs for the calls).
    Raises EngineError (``invalid_parameter``) for a ``tool_choice`` without tools
    or naming a function that is not among them, or tools vLLM rejects.
    """
    p = job.params
    tools = p.get("tools")
    choice = p.get("tool_choice")
    if not tools:
        if choice not in (None, "none", "auto"):
            raise EngineError(
                "tool_choice: no tools were given to choose from.",
                code=ERROR_INVALID_PARAMETER,
            )
        return None
    if isinstance(choice, dict):
        wanted = (choice.get("function") or {}).get("name")
        names = {(t.get("function") or {}).get("name") for t in tools}
        if wanted not in names:
            raise EngineError(
                f"tool_choice: {wanted!r} is not one of the tools given.",
                code=ERROR_INVALID_PARAMETER,
            )
    from pydantic import ValidationError
    from vllm.entrypoints.openai.chat_completion.protocol import (
        ChatCompletionRequest,
    )

    fields: dict[str, Any] = {
        "model": model,
        "messages": job.messages,
        "tools": tools_normalised(tools),
        "tool_choice": choice or "auto",
    }
    if p.get("parallel_tool_calls") is not None:
        fields["parallel_tool_calls"] = bool(p["parallel_tool_calls"])
    if p.get("response_format"):
        fields["response_format"] = response_format_openai(p["response_format"])
    try:
        request = ChatCompletionRequest(**fields)
        parser = parser_cls(tokenizer, request.tools)
        if request.tool_choice != "none":
            request = parser.adjust_request(request)
        constraint = request.structured_outputs
        if constraint is not None and constraint.structural_tag:
            tag = json_layout_exact(json.loads(constraint.structural_tag))
            constraint.structural_tag = json.dumps(tag)
    except (ValidationError, ValueError) as exc:
        raise EngineError(
            f"tools: vLLM cannot use them: {exc}", code=ERROR_INVALID_PARAMETER
        ) from exc
    return ToolSession(parser=parser, request=request, prompt_tokens=prompt_tokens)
