"""Count prompt tokens exactly as a pool's engine will (DESIGN §9: never an estimate).

The web tier builds each prompt under the pool's context window before it submits the
job; it counts with the serving model's own tokenizer and chat template:

- ``llamacpp``: a vocabulary-only load of the same GGUF file, rendered with the same
  :class:`inference.engines.llamacpp_prompt.ChatPrompt` the engine uses, so the count equals the
  engine's ``prompt_tokens``.
- ``scripted`` (tests, benchmarks): the scripted engine's own rule.

Counters are loaded once per process and shared (read-only; no per-user state). A
counter takes the OpenAI ``tools`` and ``tool_choice`` of the request as keywords: the
llama.cpp count includes the tools rendered into the prompt (none under ``"none"``);
the scripted rule ignores them.
"""

from __future__ import annotations

import functools
from typing import Any, Protocol


class Counter(Protocol):
    """``messages -> prompt tokens`` (OpenAI chat messages), tools included."""

    def __call__(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        tool_choice: Any = None,
    ) -> int: ...


@functools.cache
def prompt_counter(engine: str = "llamacpp", model_path: str | None = None) -> Counter:
    """Return a function ``messages -> prompt tokens`` for an engine (and GGUF path).

    Raises ValueError for an unknown engine, FileNotFoundError for a missing model.
    """
    if engine == "llamacpp":
        from inference.engines.llamacpp_prompt import chat_prompt_load

        return chat_prompt_load(model_path).count
    if engine == "scripted":
        from inference.engines.scripted import ScriptedEngine

        scripted = ScriptedEngine().count_tokens

        def count(
            messages: list[dict[str, Any]],
            *,
            tools: list[dict[str, Any]] | None = None,
            tool_choice: Any = None,
        ) -> int:
            return scripted(messages)

        return count
    raise ValueError(f"unknown engine {engine!r}: choose llamacpp or scripted")
