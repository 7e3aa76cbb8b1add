"""Count prompt tokens exactly as a pool's engine will (DESIGN §9: never an estimate).

The web tier builds each prompt under the pool's context window before it submits the
job; it counts with the serving model's own tokenizer and chat template:

- ``llamacpp``: a vocabulary-only load of the same GGUF file, rendered with the same
  :class:`inference.engines.llamacpp.ChatPrompt` the engine uses, so the count equals the
  engine's ``prompt_tokens``.
- ``scripted`` (tests, benchmarks): the scripted engine's own rule.

Counters are loaded once per process and shared (read-only; no per-user state).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

Counter = Callable[[list[dict[str, str]]], int]


@functools.cache
def prompt_counter(engine: str = "llamacpp", model_path: str | None = None) -> Counter:
    """Return a function ``messages -> prompt tokens`` for an engine (and GGUF path).

    Raises ValueError for an unknown engine, FileNotFoundError for a missing model.
    """
    if engine == "llamacpp":
        from inference.engines.llamacpp import chat_prompt_load

        return chat_prompt_load(model_path).count
    if engine == "scripted":
        from inference.engines.scripted import ScriptedEngine

        return ScriptedEngine().count_tokens
    raise ValueError(f"unknown engine {engine!r}: choose llamacpp or scripted")
