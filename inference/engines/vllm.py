"""vLLM engine: an in-process ``vllm.v1`` AsyncLLM (continuous batching, prefix caching).

Every job is one vLLM request (``request_id = job_id``) streamed with
``RequestOutputKind.DELTA``; all running requests are batched into the same decode
steps by vLLM's scheduler (``max_concurrency`` = ``max_num_seqs``). The prompt is the
model's own chat template rendered by its Hugging Face tokenizer and passed as token ids,
so ``prompt_tokens`` is exact; ``completion_tokens`` counts the generated token ids and
``cached_tokens`` is vLLM's prefix-cache hit (``RequestOutput.num_cached_tokens``).
``abort(job_id)`` calls ``AsyncLLM.abort``: the request leaves the scheduler at once
and the generation finishes with ``finish_reason="cancelled"``. Job params used:
``max_tokens``, ``temperature``, ``top_p``, ``top_k``, ``repeat_penalty``, ``stop``,
``seed``, ``presence_penalty``, ``frequency_penalty``, ``logit_bias``,
``response_format`` (vLLM structured outputs), ``ignore_eos`` (benchmarks and
tests: generate exactly ``max_tokens``) and the tool-calling ones below.

Tool calling (``tools``, ``tool_choice`` ``none``/``auto``/``required``/named function,
``parallel_tool_calls``) is vLLM's own, set up as its OpenAI server does with
``--enable-auto-tool-choice --tool-call-parser hermes --tool-strict-level parameter``:
the job becomes a vLLM ``ChatCompletionRequest``; the prompt is rendered with the tools
by the tools chat template (``tool_chat_template``: the model's own template when it
mentions ``tools``, else ``vllm_hermes_tools.jinja`` next to this module, ChatML with
Hermes ``<tool_call>`` calls: SmolLM2's template has no tools); the parser
(``tool_parser``, default ``hermes``, from vLLM's ``ParserManager``) adjusts the
request, which constrains every call with vLLM structured outputs (an xgrammar
structural tag holding each call's arguments to its tool's JSON Schema: ``required`` and
a named choice must call, and with ``parallel_tool_calls: false`` only once; ``auto``
is free text until the model opens ``<tool_call>``), and its streaming extractor
(``Parser.parse_delta`` -> the tool parser's ``extract_tool_calls_streaming``) turns the
generated text into text deltas and :class:`ToolCallDelta` pieces (the first with id
``call_…`` and name, then argument fragments). Tools without ``parameters`` take
``{"type": "object", "properties": {}}`` so their arguments are ``"{}"``. A generation
that made calls finishes ``tool_calls``. A ``tool_choice`` naming no offered tool, or
given without tools, raises EngineError ``invalid_parameter``.

vLLM lives in its own venv (``.venv-vllm``, ``make test-vllm``): it pins its own torch
and transformers. On CPU it needs an HF checkpoint (``scripts/smollm2_hf.py`` converts
the bundled SmolLM2 GGUF); the KV cache size is ``kv_cache_gib`` (GiB of RAM).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from inference import protocol
from inference.engines.base import Delta, Engine, EngineError, Finish, ToolCallDelta
from inference.engines.vllm_stats import SchedulerCounts, stat_logger_factory
from inference.engines.vllm_tools import (
    ToolSession,
    structured_outputs,
    tool_session_start,
    tools_normalised,
)
from inference.params import CONTINUE
from inference.protocol import Job, Usage

DEFAULT_MODEL_DIR = ".var/models/smollm2-hf"
DEFAULT_TOOL_PARSER = "hermes"
# ChatML with Hermes tool calls, for models whose own template has no tools
HERMES_TOOLS_TEMPLATE = Path(__file__).with_name("vllm_hermes_tools.jinja")

_FINISH_REASONS = {
    "stop": protocol.FINISH_STOP,
    "length": protocol.FINISH_LENGTH,
    "abort": protocol.FINISH_CANCELLED,
}
_GiB = 1 << 30


class VllmEngine(Engine):
    """vLLM AsyncLLM on an HF checkpoint directory (``model_dir``).

    ``max_model_len`` is the context window in tokens; ``kv_cache_gib`` the KV cache in
    GiB (on CPU: RAM); ``dtype`` ``bfloat16`` or ``float32``; ``max_concurrency`` the
    number of requests batched together (vLLM ``max_num_seqs``). ``tool_parser`` is a
    vLLM tool-parser name (``--tool-call-parser``); ``tool_chat_template`` the path of
    the Jinja template that renders prompts with tools (None: the model's own when it
    renders tools, else :data:`HERMES_TOOLS_TEMPLATE`).
    """

    name = "vllm"

    def __init__(
        self,
        *,
        model_dir: str | None = None,
        max_concurrency: int = 8,
        max_model_len: int = 2048,
        kv_cache_gib: float = 1.0,
        dtype: str = "bfloat16",
        enforce_eager: bool = True,
        seed: int = 0,
        tool_parser: str = DEFAULT_TOOL_PARSER,
        tool_chat_template: str | None = None,
    ) -> None:
        self.model_dir = Path(model_dir or DEFAULT_MODEL_DIR).resolve()
        self.model = self.model_dir.name
        self.max_concurrency = max(1, max_concurrency)
        self.max_model_len = max_model_len
        self.kv_cache_gib = kv_cache_gib
        self.dtype = dtype
        self.enforce_eager = enforce_eager
        self.seed = seed
        self.tool_parser = tool_parser
        self.tool_chat_template = tool_chat_template
        self._tools_template: str | None = None
        self._parser_cls: Any = None
        self.counts = SchedulerCounts()
        self._engine: Any = None
        self._tokenizer: Any = None
        self._aborted: set[str] = set()
        self._running: set[str] = set()
        self._pending_aborts: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        """Start vLLM (its engine-core process) on ``model_dir``; idempotent.

        AsyncLLM must be built on the loop that will run :meth:`generate` (its output
        handler task and ZMQ sockets belong to that loop), so this blocks the loop
        while vLLM starts (tens of seconds on CPU); the worker calls it before it
        takes jobs or heartbeats. Raises :class:`EngineError` if the checkpoint
        directory does not exist.
        """
        if self._engine is not None:
            return
        if not (self.model_dir / "config.json").exists():
            raise EngineError(
                f"no HF checkpoint in {self.model_dir}: run scripts/smollm2_hf.py"
            )
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        from transformers import AutoTokenizer
        from vllm import AsyncEngineArgs
        from vllm.parser.parser_manager import ParserManager
        from vllm.v1.engine.async_llm import AsyncLLM

        self._tokenizer = AutoTokenizer.from_pretrained(str(self.model_dir))
        self._parser_cls = ParserManager.get_parser(
            tool_parser_name=self.tool_parser,
            enable_auto_tools=True,
            # every tool strict: a call's arguments always fit its JSON Schema
            tool_strict_level="parameter",
            model_name=self.model,
            tokenizer=self._tokenizer,
        )
        args = AsyncEngineArgs(
            model=str(self.model_dir),
            served_model_name=[self.model],
            dtype=self.dtype,
            max_model_len=self.max_model_len,
            max_num_seqs=self.max_concurrency,
            enable_prefix_caching=True,
            enforce_eager=self.enforce_eager,
            kv_cache_memory_bytes=int(self.kv_cache_gib * _GiB),
            seed=self.seed,
            # no periodic stats log lines; our stat logger still gets every step
            disable_log_stats=True,
        )
        self._engine = AsyncLLM.from_engine_args(
            args, stat_loggers=[stat_logger_factory(self.counts)]
        )

    async def close(self) -> None:
        """Stop vLLM and its engine-core process."""
        if self._engine is not None:
            self._engine.shutdown()
            self._engine = None

    def unfinished_requests(self) -> int:
        """Return how many requests vLLM's front end still tracks (not yet finished)."""
        return self._engine.get_num_unfinished_requests() if self._engine else 0

    def _template_with_tools(self) -> str:
        """Return the Jinja chat template that renders tools (see the class doc)."""
        if self._tools_template is None:
            if self.tool_chat_template:
                self._tools_template = Path(self.tool_chat_template).read_text()
            else:
                own = self._tokenizer.chat_template or ""
                self._tools_template = (
                    own if "tools" in own else HERMES_TOOLS_TEMPLATE.read_text()
                )
        return self._tools_template

    def _tokens(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        continue_final: bool = False,
    ) -> list[int]:
        # continue_final: the last (assistant) message left open, no generation
        # prompt (transformers' continue_final_message)
        opening = {
            "add_generation_prompt": not continue_final,
            "continue_final_message": continue_final,
        }
        if tools:
            prompt = self._tokenizer.apply_chat_template(
                messages,
                tools=tools,
                chat_template=self._template_with_tools(),
                tokenize=False,
                **opening,
            )
        else:
            prompt = self._tokenizer.apply_chat_template(
                messages, tokenize=False, **opening
            )
        return list(self._tokenizer.encode(prompt, add_special_tokens=False))

    def count_tokens(self, messages: list[dict[str, str]]) -> int:
        """Return the prompt tokens of ``messages`` under the model's chat template."""
        if self._tokenizer is None:
            from transformers import AutoTokenizer

            self._tokenizer = AutoTokenizer.from_pretrained(str(self.model_dir))
        return len(self._tokens(messages))

    def _fit(
        self,
        messages: list[dict[str, Any]],
        max_tokens: int,
        tools: list[dict[str, Any]] | None = None,
        continue_final: bool = False,
    ) -> tuple[list[int], int]:
        """Drop the oldest turns until prompt + answer fit ``max_model_len`` tokens.

        The system message and the newest message (with ``continue_final``, the
        question and the answer it continues) are always kept. Returns the prompt
        token ids and the (possibly reduced) max_tokens. Raises EngineError
        (``context_overflow``) if even those leave no room to answer.
        """
        msgs = list(messages)
        kept = 3 if continue_final else 2
        tokens = self._tokens(msgs, tools, continue_final)
        while len(tokens) + max_tokens > self.max_model_len and len(msgs) > kept:
            drop = 1 if msgs[0]["role"] == "system" else 0
            del msgs[drop]
            while len(msgs) > drop + kept - 1 and msgs[drop]["role"] != "user":
                del msgs[drop]
            tokens = self._tokens(msgs, tools, continue_final)
        room = self.max_model_len - len(tokens)
        if room < 1:
            raise EngineError(
                "The message is too long for the model's context window.",
                code=protocol.ERROR_CONTEXT_OVERFLOW,
            )
        return tokens, min(max_tokens, room)

    def abort(self, job_id: str) -> None:
        """Abort ``job_id`` in vLLM (frees its batch slot and KV blocks at once).

        Also valid before the job starts: it then finishes cancelled without running.
        Call from the event loop that runs :meth:`generate`.
        """
        self._aborted.add(job_id)
        if job_id in self._running and self._engine is not None:
            task = asyncio.get_running_loop().create_task(self._engine.abort(job_id))
            self._pending_aborts.add(task)
            task.add_done_callback(self._pending_aborts.discard)

    def tool_session(self, job: Job, prompt_tokens: list[int]) -> ToolSession | None:
        """Return the job's :class:`ToolSession` (None when it offers no tools):
        :func:`inference.engines.vllm_tools.tool_session_start` with this engine's
        model, tool parser and tokenizer."""
        return tool_session_start(
            model=self.model,
            parser_cls=self._parser_cls,
            tokenizer=self._tokenizer,
            job=job,
            prompt_tokens=prompt_tokens,
        )

    def _sampling(
        self, job: Job, max_tokens: int, tools: ToolSession | None = None
    ) -> Any:
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        p = job.params
        seed = p.get("seed")
        bias = p.get("logit_bias")
        structured = structured_outputs(p.get("response_format"))
        skip_special_tokens = True
        if tools is not None:
            request = tools.request
            if request.structured_outputs is not None:
                structured = request.structured_outputs
            elif request.response_format is None:
                structured = None
            skip_special_tokens = request.skip_special_tokens
        return SamplingParams(
            max_tokens=max_tokens,
            temperature=float(p.get("temperature", 0.7)),
            top_p=float(p.get("top_p", 0.95)),
            top_k=int(p.get("top_k", 40)),
            repetition_penalty=float(p.get("repeat_penalty", 1.1)),
            presence_penalty=float(p.get("presence_penalty", 0.0)),
            frequency_penalty=float(p.get("frequency_penalty", 0.0)),
            logit_bias={int(k): v for k, v in bias.items()} if bias else None,
            structured_outputs=structured,
            skip_special_tokens=skip_special_tokens,
            stop=p.get("stop") or None,
            seed=int(seed) if seed is not None else None,
            ignore_eos=bool(p.get("ignore_eos", False)),
            output_kind=RequestOutputKind.DELTA,
        )

    async def generate(self, job: Job) -> AsyncIterator[Delta | ToolCallDelta | Finish]:
        """Stream the job through vLLM; yield its text and tool-call deltas, then a
        Finish with usage (``tool_calls`` when calls were made).

        Raises :class:`EngineError` when the prompt does not fit or vLLM fails.
        """
        if self._engine is None:
            raise EngineError("vLLM engine not started")
        from vllm import TokensPrompt

        try:
            tools = job.params.get("tools") or None
            tokens, max_tokens = self._fit(
                job.messages,
                job.max_tokens,
                tools_normalised(tools) if tools else None,
                continue_final=bool(job.params.get(CONTINUE)),
            )
            session = self.tool_session(job, tokens)
            usage = Usage(prompt_tokens=len(tokens))
            if job.job_id in self._aborted:
                yield Finish(protocol.FINISH_CANCELLED, usage)
                return
            self._running.add(job.job_id)
            finish = protocol.FINISH_STOP
            try:
                async for out in self._engine.generate(
                    TokensPrompt(prompt_token_ids=tokens),
                    self._sampling(job, max_tokens, session),
                    job.job_id,
                ):
                    if out.num_cached_tokens:
                        usage.cached_tokens = max(
                            usage.cached_tokens, int(out.num_cached_tokens)
                        )
                    for completion in out.outputs[:1]:
                        usage.completion_tokens += len(completion.token_ids)
                        if session is not None:
                            for piece in session.feed(
                                text=completion.text,
                                token_ids=list(completion.token_ids),
                                finished=completion.finish_reason is not None,
                            ):
                                yield piece
                        elif completion.text:
                            yield Delta(completion.text)
                        if completion.finish_reason:
                            finish = _FINISH_REASONS.get(
                                completion.finish_reason, protocol.FINISH_STOP
                            )
                    if out.finished:
                        break
            except EngineError:
                raise
            except Exception as exc:  # noqa: BLE001 - surfaced to the worker
                raise EngineError(f"vLLM failed: {exc!r}") from exc
            if job.job_id in self._aborted:
                finish = protocol.FINISH_CANCELLED
            elif session is not None and session.called:
                if finish == protocol.FINISH_STOP:
                    finish = protocol.FINISH_TOOL_CALLS
            yield Finish(finish, usage)
        finally:
            self._running.discard(job.job_id)
            self._aborted.discard(job.job_id)
