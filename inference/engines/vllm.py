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
``response_format`` (vLLM structured outputs) and ``ignore_eos`` (benchmarks and
tests: generate exactly ``max_tokens``).

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
from inference.engines.base import Delta, Engine, EngineError, Finish
from inference.protocol import Job, Usage

DEFAULT_MODEL_DIR = ".var/models/smollm2-hf"

_FINISH_REASONS = {
    "stop": protocol.FINISH_STOP,
    "length": protocol.FINISH_LENGTH,
    "abort": protocol.FINISH_CANCELLED,
}
_GiB = 1 << 30


def _structured(response_format: dict[str, Any] | None) -> Any:
    """Return vLLM's structured-output constraint for ``response_format`` (None: none):
    any JSON object for ``json_object``, the schema for ``json_schema``."""
    if not response_format:
        return None
    from vllm.sampling_params import StructuredOutputsParams

    if response_format.get("type") == "json_schema":
        return StructuredOutputsParams(json=response_format["schema"])
    return StructuredOutputsParams(json_object=True)


class SchedulerCounts:
    """The engine core's latest scheduler figures (requests, not tokens).

    Filled from vLLM's per-step ``SchedulerStats`` through a custom stat logger, so it
    reflects the scheduler itself (the separate engine-core process), not our own
    bookkeeping. ``prefix_cache_hits``/``prefix_cache_queries`` are cumulative tokens.
    """

    def __init__(self) -> None:
        self.running = 0
        self.waiting = 0
        self.max_running = 0
        self.prefix_cache_queries = 0
        self.prefix_cache_hits = 0
        self.steps = 0


def _stat_logger_factory(counts: SchedulerCounts) -> Any:
    """Return a vLLM ``StatLoggerFactory`` that copies scheduler stats into ``counts``."""
    from vllm.v1.metrics.loggers import StatLoggerBase

    class _Logger(StatLoggerBase):
        def __init__(self, vllm_config: Any, engine_index: int = 0) -> None:
            self.counts = counts

        def record(
            self,
            scheduler_stats: Any,
            iteration_stats: Any,
            mm_cache_stats: Any = None,
            engine_idx: int = 0,
        ) -> None:
            if scheduler_stats is None:
                return
            c = self.counts
            c.running = scheduler_stats.num_running_reqs
            c.waiting = scheduler_stats.num_waiting_reqs
            c.max_running = max(c.max_running, c.running)
            c.steps += 1
            pcs = scheduler_stats.prefix_cache_stats
            if pcs is not None:
                c.prefix_cache_queries += int(getattr(pcs, "queries", 0) or 0)
                c.prefix_cache_hits += int(getattr(pcs, "hits", 0) or 0)

        def log_engine_initialized(self) -> None:
            pass

    return _Logger


class VllmEngine(Engine):
    """vLLM AsyncLLM on an HF checkpoint directory (``model_dir``).

    ``max_model_len`` is the context window in tokens; ``kv_cache_gib`` the KV cache in
    GiB (on CPU: RAM); ``dtype`` ``bfloat16`` or ``float32``; ``max_concurrency`` the
    number of requests batched together (vLLM ``max_num_seqs``).
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
    ) -> None:
        self.model_dir = Path(model_dir or DEFAULT_MODEL_DIR).resolve()
        self.model = self.model_dir.name
        self.max_concurrency = max(1, max_concurrency)
        self.max_model_len = max_model_len
        self.kv_cache_gib = kv_cache_gib
        self.dtype = dtype
        self.enforce_eager = enforce_eager
        self.seed = seed
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
        from vllm.v1.engine.async_llm import AsyncLLM

        self._tokenizer = AutoTokenizer.from_pretrained(str(self.model_dir))
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
            args, stat_loggers=[_stat_logger_factory(self.counts)]
        )

    async def close(self) -> None:
        """Stop vLLM and its engine-core process."""
        if self._engine is not None:
            self._engine.shutdown()
            self._engine = None

    def unfinished_requests(self) -> int:
        """Return how many requests vLLM's front end still tracks (not yet finished)."""
        return self._engine.get_num_unfinished_requests() if self._engine else 0

    def _tokens(self, messages: list[dict[str, str]]) -> list[int]:
        prompt = self._tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=True
        )
        return list(self._tokenizer.encode(prompt, add_special_tokens=False))

    def count_tokens(self, messages: list[dict[str, str]]) -> int:
        """Return the prompt tokens of ``messages`` under the model's chat template."""
        if self._tokenizer is None:
            from transformers import AutoTokenizer

            self._tokenizer = AutoTokenizer.from_pretrained(str(self.model_dir))
        return len(self._tokens(messages))

    def _fit(
        self, messages: list[dict[str, str]], max_tokens: int
    ) -> tuple[list[int], int]:
        """Drop the oldest turns until prompt + answer fit ``max_model_len`` tokens.

        The system message and the newest message are always kept. Returns the prompt
        token ids and the (possibly reduced) max_tokens. Raises EngineError
        (``context_overflow``) if even those leave no room to answer.
        """
        msgs = list(messages)
        tokens = self._tokens(msgs)
        while len(tokens) + max_tokens > self.max_model_len and len(msgs) > 2:
            drop = 1 if msgs[0]["role"] == "system" else 0
            del msgs[drop]
            while len(msgs) > drop + 1 and msgs[drop]["role"] != "user":
                del msgs[drop]
            tokens = self._tokens(msgs)
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

    def _sampling(self, job: Job, max_tokens: int) -> Any:
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        p = job.params
        seed = p.get("seed")
        bias = p.get("logit_bias")
        return SamplingParams(
            max_tokens=max_tokens,
            temperature=float(p.get("temperature", 0.7)),
            top_p=float(p.get("top_p", 0.95)),
            top_k=int(p.get("top_k", 40)),
            repetition_penalty=float(p.get("repeat_penalty", 1.1)),
            presence_penalty=float(p.get("presence_penalty", 0.0)),
            frequency_penalty=float(p.get("frequency_penalty", 0.0)),
            logit_bias={int(k): v for k, v in bias.items()} if bias else None,
            structured_outputs=_structured(p.get("response_format")),
            stop=p.get("stop") or None,
            seed=int(seed) if seed is not None else None,
            ignore_eos=bool(p.get("ignore_eos", False)),
            output_kind=RequestOutputKind.DELTA,
        )

    async def generate(self, job: Job) -> AsyncIterator[Delta | Finish]:
        """Stream the job through vLLM; yield its deltas, then a Finish with usage.

        Raises :class:`EngineError` when the prompt does not fit or vLLM fails.
        """
        if self._engine is None:
            raise EngineError("vLLM engine not started")
        from vllm import TokensPrompt

        try:
            tokens, max_tokens = self._fit(job.messages, job.max_tokens)
            usage = Usage(prompt_tokens=len(tokens))
            if job.job_id in self._aborted:
                yield Finish(protocol.FINISH_CANCELLED, usage)
                return
            self._running.add(job.job_id)
            finish = protocol.FINISH_STOP
            try:
                async for out in self._engine.generate(
                    TokensPrompt(prompt_token_ids=tokens),
                    self._sampling(job, max_tokens),
                    job.job_id,
                ):
                    if out.num_cached_tokens:
                        usage.cached_tokens = max(
                            usage.cached_tokens, int(out.num_cached_tokens)
                        )
                    for completion in out.outputs[:1]:
                        usage.completion_tokens += len(completion.token_ids)
                        if completion.text:
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
            yield Finish(finish, usage)
        finally:
            self._running.discard(job.job_id)
            self._aborted.discard(job.job_id)
