"""Small GGUF models on three tool prompts: which tool they pick, what arguments, how fast.

    .venv/bin/python bench/tool_models.py [GGUF ...] [--threads 2]

Each model (default: the bundled SmolLM2-135M-Instruct) answers three user requests
offered four tools, once with ``tool_choice`` ``required`` (the grammar makes the call
well-formed: the choice of tool and the argument values are the model's) and once with
``auto`` (does it call a tool at all?), at temperature 0; then a plain 64-token answer
gives its decode speed (completion tokens / wall time, prompt included; the best of
three runs). A GGUF without
a chat template (a base model) is given Gemma's turn format, marked in the output.
Prints one Markdown table row per model and prompt. No services.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from inference.engines.llamacpp import LlamaCppEngine  # noqa: E402
from inference.engines.llamacpp_prompt import ChatPrompt  # noqa: E402
from inference.protocol import Job  # noqa: E402
from inference.toolcalls import join  # noqa: E402

GEMMA_TURNS = (
    "{{ bos_token }}{% for m in messages %}<start_of_turn>"
    "{{ 'model' if m['role'] == 'assistant' else 'user' }}\n{{ m['content'] }}"
    "<end_of_turn>\n{% endfor %}<start_of_turn>model\n"
)


def tool(name: str, description: str, **props: str) -> dict:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": {
                    k: {"type": "string", "description": v} for k, v in props.items()
                },
                "required": list(props),
            },
        },
    }


TOOLS = [
    tool("get_weather", "Get the current weather in a city.", city="The city"),
    tool("calculate", "Evaluate an arithmetic expression.", expression="e.g. 2*(3+4)"),
    tool("search_documents", "Search the user's documents.", query="What to look for"),
    tool(
        "get_time", "Get the current time in a time zone.", timezone="e.g. Europe/Paris"
    ),
]
PROMPTS = [
    ("What's the weather like in Paris right now?", "get_weather"),
    ("What is 17 times 23?", "calculate"),
    ("Find the invoice from March in my documents.", "search_documents"),
]


class BenchEngine(LlamaCppEngine):
    """The engine, with Gemma's turns for a GGUF that has no chat template."""

    templated = True

    def _load(self) -> None:
        from llama_cpp import Llama

        llm = Llama(
            model_path=str(self.model_path),
            n_ctx=self.n_ctx,
            n_threads=self.n_threads,
            seed=0,
            verbose=False,
        )
        if not llm.metadata.get("tokenizer.chat_template"):
            llm.metadata["tokenizer.chat_template"] = GEMMA_TURNS
            self.templated = False
        self._free.put(llm)
        self._counter = llm
        self._prompt = ChatPrompt(llm, name=self.model_path.name)
        self._stop_ids = self._prompt.stop_ids


def collect(engine: LlamaCppEngine, job: Job) -> list:
    async def run() -> list:
        return [item async for item in engine.generate(job)]

    return asyncio.run(run())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("models", nargs="*")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    print("| model | prompt | required: call | auto: answer | tok/s |")
    print("|---|---|---|---|---|")
    for path in args.models or [None]:
        engine = BenchEngine(
            model_path=path, n_ctx=2048, n_threads=args.threads, background_slot=False
        )
        asyncio.run(engine.start())
        name = engine.model + (
            "" if engine.templated else " (no template: Gemma turns)"
        )
        plain = [{"role": "user", "content": "Tell me about the history of Paris."}]
        speeds = []
        for _ in range(3):  # the best of three: the machine's cores are shared
            start = time.perf_counter()
            items = collect(
                engine,
                Job(
                    job_id="speed",
                    messages=plain,
                    params={"max_tokens": 64, "temperature": 0, "ignore_eos": True},
                ),
            )
            elapsed = time.perf_counter() - start
            speeds.append(items[-1].usage.completion_tokens / elapsed)
        speed = max(speeds)
        for prompt, _ in PROMPTS:
            messages = [{"role": "user", "content": prompt}]
            cells = []
            for choice, budget in (("required", 60), ("auto", 60)):
                items = collect(
                    engine,
                    Job(
                        job_id=choice,
                        messages=messages,
                        params={
                            "max_tokens": budget,
                            "temperature": 0,
                            "tools": TOOLS,
                            "tool_choice": choice,
                            "parallel_tool_calls": False,
                        },
                    ),
                )
                content, calls = join(items[:-1])
                if calls:
                    cells.append(f"`{calls[0].name}({calls[0].arguments})`")
                else:
                    text = " ".join(content.split())[:70].replace("|", "/")
                    cells.append(f"text: {text!r} ({items[-1].finish_reason})")
            print(f"| {name} | {prompt} | {cells[0]} | {cells[1]} | {speed:.0f} |")
        asyncio.run(engine.close())


if __name__ == "__main__":
    main()
