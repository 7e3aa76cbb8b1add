"""Validate a ``/v1/chat/completions`` body's generation parameters (pure: no I/O).

Every field of the body is either validated here and handed to the engine
(:data:`inference.params.ENGINE_PARAMS` says which engine implements which; the
gateway refuses a pool whose engine does not), or refused by name with a 400
``unsupported_parameter``: nothing is accepted and ignored. Ranges are OpenAI's
(temperature 0..2, top_p 0..1, penalties -2..2, logit_bias values -100..100 on at most
:data:`LOGIT_BIAS_MAX` tokens, top_logprobs 0..20). A ``max_tokens`` above the model's
limit is the gateway's 400 (the limit depends on the pool).

Tool calling: ``tools`` (at most :data:`.tool_params.TOOLS_MAX` functions, each ``{"type":
"function", "function": {"name", "description"?, "parameters"?, "strict"?}}``, a
name of 1-64 characters ``[A-Za-z0-9_-]``, unique; ``parameters`` a JSON Schema
object of at most :data:`SCHEMA_MAX_CHARS` characters of JSON, all tools' together
at most :data:`TOOLS_MAX_CHARS`), ``tool_choice`` (``"none"``, ``"auto"``,
``"required"`` or ``{"type": "function", "function": {"name"}}`` naming one of the
tools; not without ``tools``) and ``parallel_tool_calls`` (bool) travel to the
engine under their OpenAI names, tools normalised to that shape.

Errors are :class:`~chatsite.errors.InvalidInput` with the field in ``param``
(OpenAI's ``error.param``).
"""

from __future__ import annotations

import json
from typing import Any

from conversations.openai.invalid import (
    INVALID,
    invalid_input,
    unicode_check,
    unsupported,
)
from conversations.openai.tool_params import SCHEMA_MAX_CHARS, tool_params_parse

LOGIT_BIAS_MAX = 300  # tokens, OpenAI's limit
USER_MAX_CHARS = 256

# Fields of the body that are not generation parameters (requests.py reads them).
ENVELOPE = frozenset({"model", "messages", "stream", "stream_options", "cache", "user"})
# OpenAI fields no engine of ours implements: refused by name unless null, or set to
# the value that means "off" (the right-hand side).
REFUSED_UNLESS = {
    "n": 1,
    "logprobs": False,
    "top_logprobs": None,
    "functions": None,
    "function_call": None,
}
REFUSED_WHY = {
    "n": "only one choice per request is generated (`n` = 1)",
    "logprobs": "token log probabilities are not returned",
    "top_logprobs": "token log probabilities are not returned",
    "functions": "the deprecated `functions` field is not accepted; use `tools`",
    "function_call": "the deprecated `function_call` field is not accepted; use "
    "`tool_choice`",
}


def _number(body: dict[str, Any], name: str, lo: float, hi: float) -> float | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise invalid_input(f"`{name}` must be a number.", INVALID, param=name)
    if not lo <= value <= hi:
        raise invalid_input(
            f"`{name}` must be between {lo:g} and {hi:g}; it is {value:g}.",
            INVALID,
            param=name,
        )
    return float(value)


def _integer(value: Any, name: str, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise invalid_input(
            f"`{name}` must be an integer from {lo:,} to {hi:,}.", INVALID, param=name
        )
    return value


def _stop(value: Any) -> list[str]:
    stops = [value] if isinstance(value, str) else value
    if (
        not isinstance(stops, list)
        or len(stops) > 4
        or not all(isinstance(s, str) and s for s in stops)
    ):
        raise invalid_input(
            "`stop` must be a string or a list of up to 4 non-empty strings.",
            INVALID,
            param="stop",
        )
    for stop_text in stops:
        unicode_check(stop_text, "`stop`", param="stop")
    return list(stops)


def _logit_bias(value: Any) -> dict[str, float]:
    if not isinstance(value, dict) or len(value) > LOGIT_BIAS_MAX:
        raise invalid_input(
            "`logit_bias` must be an object mapping up to "
            f"{LOGIT_BIAS_MAX} token ids to a bias from -100 to 100.",
            INVALID,
            param="logit_bias",
        )
    bias: dict[str, float] = {}
    for key, number in value.items():
        if not key.isdigit() or len(key) > 9:
            raise invalid_input(
                f"`logit_bias` key {key!r} is not a token id (a non-negative integer).",
                INVALID,
                param="logit_bias",
            )
        if isinstance(number, bool) or not isinstance(number, int | float):
            raise invalid_input(
                f"`logit_bias[{key}]` must be a number.", INVALID, param="logit_bias"
            )
        if not -100 <= number <= 100:
            raise invalid_input(
                f"`logit_bias[{key}]` must be between -100 and 100; it is {number:g}.",
                INVALID,
                param="logit_bias",
            )
        bias[str(int(key))] = float(number)
    return bias


def _response_format(value: Any) -> dict[str, Any] | None:
    """Return the job's ``response_format`` (None for ``text``, the default)."""
    kind = value.get("type") if isinstance(value, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "json_object"}
    if kind != "json_schema":
        raise invalid_input(
            '`response_format.type` must be "text", "json_object" or "json_schema".',
            INVALID,
            param="response_format",
        )
    spec = value.get("json_schema")
    schema = spec.get("schema") if isinstance(spec, dict) else None
    if not isinstance(schema, dict):
        raise invalid_input(
            "`response_format.json_schema.schema` must be a JSON Schema object.",
            INVALID,
            param="response_format",
        )
    if len(json.dumps(schema)) > SCHEMA_MAX_CHARS:
        raise invalid_input(
            "`response_format.json_schema.schema` is over "
            f"{SCHEMA_MAX_CHARS:,} characters of JSON.",
            INVALID,
            param="response_format",
        )
    return {"type": "json_schema", "schema": schema}


def _refused(body: dict[str, Any]) -> None:
    """Refuse OpenAI fields we implement nowhere, and fields we do not know."""
    for name, value in body.items():
        if name in ENVELOPE or name in _PARSERS or name in _TOOL_FIELDS:
            continue
        if value is None:
            continue
        if name in REFUSED_UNLESS:
            off = REFUSED_UNLESS[name]
            if off is not None and type(value) is type(off) and value == off:
                continue
            if name == "top_logprobs":
                _integer(value, name, 0, 20)
            raise unsupported(name, REFUSED_WHY[name])
        raise unsupported(name, "this API does not know this field")


def _max_tokens(value: Any, name: str) -> int:
    if isinstance(value, float) and value.is_integer():
        value = int(value)  # 1e30 is JSON's number 10**30: the limit check names it
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise invalid_input(
            f"`{name}` must be a positive integer.", INVALID, param=name
        )
    return value


_PARSERS: dict[str, Any] = {
    "max_completion_tokens": lambda v: _max_tokens(v, "max_completion_tokens"),
    "max_tokens": lambda v: _max_tokens(v, "max_tokens"),
    "temperature": None,
    "top_p": None,
    "presence_penalty": None,
    "frequency_penalty": None,
    "stop": _stop,
    "seed": lambda v: _integer(v, "seed", -(2**63), 2**63 - 1),
    "logit_bias": _logit_bias,
    "response_format": _response_format,
}
_TOOL_FIELDS = frozenset({"tools", "tool_choice", "parallel_tool_calls"})
_RANGES = {
    "temperature": (0, 2),
    "top_p": (0, 1),
    "presence_penalty": (-2, 2),
    "frequency_penalty": (-2, 2),
}


def params_parse(body: dict[str, Any]) -> dict[str, Any]:
    """Return the generation parameters of a chat completions ``body`` (decoded JSON).

    Keys are :mod:`inference.params` names (``max_completion_tokens`` becomes
    ``max_tokens``; it wins over ``max_tokens``); absent and null fields are left out,
    as are values that mean the default (``response_format`` ``text``, an empty
    ``stop`` list). Raises InvalidInput: ``invalid_parameter`` for a bad value,
    ``unsupported_parameter`` for a field no engine implements or an unknown one.
    """
    _refused(body)
    params: dict[str, Any] = {}
    for name, parse in _PARSERS.items():
        value = body.get(name)
        if value is None:
            continue
        if name in _RANGES:
            lo, hi = _RANGES[name]
            params[name] = _number(body, name, lo, hi)
            continue
        parsed = parse(value)
        key = "max_tokens" if name == "max_completion_tokens" else name
        if parsed not in (None, []) and key not in params:
            params[key] = parsed
    params.update(tool_params_parse(body))
    return params


def user_parse(value: Any) -> str | None:
    """Return the ``user`` field (an end-user id for the caller's own tracking; it is
    accepted and not used); raise InvalidInput unless a string of at most
    :data:`USER_MAX_CHARS` characters."""
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > USER_MAX_CHARS:
        raise invalid_input(
            f"`user` must be a string of at most {USER_MAX_CHARS} characters.",
            INVALID,
            param="user",
        )
    unicode_check(value, "`user`", param="user")
    return value
