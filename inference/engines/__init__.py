"""Inference engines behind one interface (DESIGN §6). See :mod:`inference.engines.base`."""

from __future__ import annotations

from typing import Any

from inference.engines.base import Engine


def engine_create(name: str, **options: Any) -> Engine:
    """Instantiate an engine by name: ``llamacpp``, ``vllm``, ``openai`` or ``scripted``.

    Raises ``ValueError`` for an unknown name. Engines are imported lazily so a process
    that never uses llama.cpp (or vLLM, which only exists in ``.venv-vllm``) never
    loads it.
    """
    if name == "llamacpp":
        from inference.engines.llamacpp import LlamaCppEngine

        return LlamaCppEngine(**options)
    if name == "scripted":
        from inference.engines.scripted import ScriptedEngine

        return ScriptedEngine(**options)
    if name == "vllm":
        from inference.engines.vllm import VllmEngine

        return VllmEngine(**options)
    if name == "openai":
        from inference.engines.openai import OpenAIEngine

        return OpenAIEngine(**options)
    raise ValueError(
        f"unknown engine {name!r}: choose llamacpp, vllm, openai or scripted"
    )
