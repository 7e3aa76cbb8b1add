"""What offering the chat's tools costs a turn on the embedded model: prompt tokens
and time to the first token with and without the four built-ins' definitions.

    .venv/bin/python bench/tool_offer_cost.py [--runs 5]

SmolLM2-135M (the bundled GGUF, llama.cpp, 2 threads), one system and one user
message. "cold": the context reset before each run (a new chat on a slot that held
something else); "warm": five different questions in a row on one context, so each
reuses the longest common token prefix as the engine's slots do. Prints token counts
and first-token times in ms. No services needed.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.boot import django_start  # noqa: E402

SYSTEM = {"role": "system", "content": "You are a helpful assistant."}
QUESTIONS = [
    "Explain how a rainbow forms, in three short paragraphs.",
    "What is the capital of France?",
    "Write a haiku about rain.",
    "How do magnets work?",
    "What is 17 times 23?",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    django_start()
    import llama_cpp

    from inference.engines.llamacpp_prompt import bundled_model_path, chat_prompt_load
    from tools import registry

    defs = registry.openai_tools(registry.registered_tools())
    prompt = chat_prompt_load()
    llm = llama_cpp.Llama(
        model_path=str(bundled_model_path()), n_ctx=4096, n_threads=2, verbose=False
    )

    def first_token_ms(messages: list[dict[str, str]], tools: list | None) -> float:
        tokens = prompt.tokens(messages, llm=llm, tools=tools)
        started = time.monotonic()
        for _ in llm.generate(tokens, temp=0):  # reuses the common prefix
            break
        return (time.monotonic() - started) * 1000

    first = [SYSTEM, {"role": "user", "content": QUESTIONS[0]}]
    names = [d["function"]["name"] for d in defs]
    print(f"tools offered: {', '.join(names)}")
    print(
        f"prompt tokens: {prompt.count(first)} without tools, "
        f"{prompt.count(first, tools=defs, tool_choice='auto')} with them"
    )
    for label, tools in (("without tools", None), ("with tools", defs)):
        cold = []
        for _ in range(args.runs):
            llm.reset()
            cold.append(first_token_ms(first, tools))
        llm.reset()
        warm = [
            first_token_ms([SYSTEM, {"role": "user", "content": q}], tools)
            for q in QUESTIONS
        ]
        print(
            f"{label:14} cold first token p50 {statistics.median(cold):7.0f} ms "
            f"(min {min(cold):.0f}); warm, five new chats in a row: "
            + ", ".join(f"{v:.0f}" for v in warm)
            + " ms"
        )


if __name__ == "__main__":
    main()
