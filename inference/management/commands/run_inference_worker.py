"""`manage.py run_inference_worker --pool NAME --engine llamacpp|vllm|openai|scripted
[--concurrency N] [--model M] [--base-url URL]`, or an embedding pool:
`--pool embed --engine sentence-transformers` (the bundled all-MiniLM-L6-v2) or
`--kind embedding --engine openai --base-url URL --model M --dim N` (a remote
``/v1/embeddings``). An embedding model whose dimension differs from the stored vectors'
(EMBEDDING_DIM) is refused at start.

SIGTERM / SIGINT: drain (take no new job, finish the running ones, exit 0). A second
signal aborts the running jobs (they end ``cancelled``) so the worker exits at once.
Timing settings: INFERENCE_HEARTBEAT_S, INFERENCE_WORKER_TTL_S, INFERENCE_RECLAIM_S.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import signal
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from inference import metrics
from inference.embed_worker import EmbeddingDimensionError, EmbedWorker
from inference.embeddings import EMBEDDING_DIM
from inference.engines import engine_create
from inference.engines.embedding import embedding_engine_create
from inference.worker import Worker

EMBEDDING_ENGINES = ("sentence-transformers",)


def startup_freeze() -> None:
    """Collect the start-up's garbage, then move every object left (Django, the
    engine and its model, the imports: they live as long as the process) out of
    the cyclic collector's scans (``gc.freeze``), as the web process does
    (chatsite/asgi.py).

    Otherwise the worker's first full collection comes with its first burst of jobs
    (the thresholds count the jobs' allocations) and walks them all while the event
    loop waits: a scripted worker's ~210,000 start-up objects took 150-520 ms on a
    busy core, every job taken then started late and together
    (bench/results/2026-12-05-burst.md).
    """
    gc.collect()
    gc.freeze()


class Command(BaseCommand):
    help = "Serve one inference pool from Redis with one engine (SIGTERM drains gracefully)."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "--pool", default=None, help="pool name (default: INFERENCE_DEFAULT_POOL)"
        )
        parser.add_argument(
            "--engine",
            default="llamacpp",
            choices=["llamacpp", "vllm", "openai", "scripted", *EMBEDDING_ENGINES],
        )
        parser.add_argument(
            "--kind",
            choices=["chat", "embedding"],
            default=None,
            help="what the pool serves (default: embedding for sentence-transformers, "
            "else chat)",
        )
        parser.add_argument(
            "--dim",
            type=int,
            default=None,
            help="embedding openai: the vectors' dimension (must equal EMBEDDING_DIM)",
        )
        parser.add_argument(
            "--gather-ms",
            type=float,
            default=None,
            help="embedding: batching window, ms (default EMBEDDING_GATHER_MS)",
        )
        parser.add_argument(
            "--max-batch",
            type=int,
            default=None,
            help="embedding: most texts per batch (default EMBEDDING_MAX_BATCH)",
        )
        parser.add_argument(
            "--concurrency",
            type=int,
            default=None,
            help="job slots (default: engine's)",
        )
        parser.add_argument(
            "--n-ctx", type=int, default=4096, help="llama.cpp context window, tokens"
        )
        parser.add_argument(
            "--threads",
            type=int,
            default=None,
            help="llama.cpp threads per slot (default: CPU cores / slots)",
        )
        parser.add_argument(
            "--model-path", default=None, help="GGUF file (default: bundled SmolLM2)"
        )
        parser.add_argument(
            "--prompt-cache-mb",
            type=int,
            default=None,
            help="llama.cpp: MiB of recent prompts' KV states kept "
            "(default: LLAMACPP_PROMPT_CACHE_MB)",
        )
        parser.add_argument(
            "--delay-ms", type=float, default=20.0, help="scripted engine: ms per token"
        )
        parser.add_argument(
            "--script-text", default=None, help="scripted engine: answer text"
        )
        parser.add_argument(
            "--first-delay-ms",
            type=float,
            default=0.0,
            help="scripted engine: ms before the first token too (a long prompt read)",
        )
        parser.add_argument(
            "--rest-delay-ms",
            type=float,
            default=0.0,
            help="scripted engine: ms after the first token, before the rest and the "
            "answer's end (a bench's POST-to-first-token window without settlement)",
        )
        parser.add_argument(
            "--script-tool-calls",
            default=None,
            help="scripted engine: JSON list of the tool calls to make when offered "
            'tools, e.g. \'[{"name": "run_python", "arguments": "{}"}]\'',
        )
        parser.add_argument(
            "--script-call-text",
            default=None,
            help="scripted engine: the text before its tool calls (default: the "
            "answer text)",
        )
        parser.add_argument(
            "--cycle",
            action=argparse.BooleanOptionalAction,
            default=False,
            help="scripted engine: repeat the text until max_tokens (--no-cycle: "
            "once, e.g. to end with --script-tool-calls)",
        )
        parser.add_argument(
            "--model",
            default=None,
            help="vllm: HF checkpoint dir (default .var/models/smollm2-hf); "
            "openai: the served model name",
        )
        parser.add_argument(
            "--base-url",
            default=None,
            help="openai: server root, e.g. http://127.0.0.1:8001 (a /v1 suffix is ok)",
        )
        parser.add_argument(
            "--api-key", default=None, help="openai: bearer token (or OPENAI_API_KEY)"
        )
        parser.add_argument(
            "--max-model-len", type=int, default=2048, help="vllm: context, tokens"
        )
        parser.add_argument(
            "--kv-cache-gib", type=float, default=1.0, help="vllm: KV cache, GiB"
        )

    def _embedding_worker(self, opts: dict[str, Any]) -> EmbedWorker:
        max_batch = opts["max_batch"] or settings.EMBEDDING_MAX_BATCH
        if opts["engine"] == "sentence-transformers":
            engine_opts: dict[str, Any] = {
                "max_batch": max_batch,
                "threads": opts["threads"],
            }
            if opts["model"]:
                engine_opts["model_path"] = opts["model"]
        elif opts["engine"] == "openai":
            if not opts["base_url"] or not opts["model"] or not opts["dim"]:
                raise CommandError(
                    "--kind embedding --engine openai needs --base-url, --model, --dim"
                )
            engine_opts = {
                "base_url": opts["base_url"],
                "model": opts["model"],
                "dim": opts["dim"],
                "api_key": opts["api_key"] or os.environ.get("OPENAI_API_KEY"),
                "max_batch": max_batch,
            }
        else:
            raise CommandError(
                f"--engine {opts['engine']} serves chat; an embedding pool takes "
                "sentence-transformers or openai"
            )
        try:
            engine = embedding_engine_create(opts["engine"], **engine_opts)
        except (ValueError, FileNotFoundError) as exc:
            raise CommandError(str(exc)) from exc
        return EmbedWorker(
            pool=opts["pool"] or settings.EMBEDDING_POOL,
            engine=engine,
            redis_url=settings.REDIS_URL,
            gather_ms=settings.EMBEDDING_GATHER_MS
            if opts["gather_ms"] is None
            else opts["gather_ms"],
            max_batch=max_batch,
            bulk_batch=settings.EMBEDDING_BULK_BATCH,
            expected_dim=EMBEDDING_DIM,
            heartbeat_s=settings.INFERENCE_HEARTBEAT_S,
            worker_ttl_s=settings.INFERENCE_WORKER_TTL_S,
            reclaim_s=settings.INFERENCE_RECLAIM_S,
        )

    def handle(self, *args: Any, **opts: Any) -> None:
        kind = opts["kind"] or (
            "embedding" if opts["engine"] in EMBEDDING_ENGINES else "chat"
        )
        if kind == "embedding":
            self._serve(self._embedding_worker(opts))
            return
        if opts["engine"] in EMBEDDING_ENGINES:
            raise CommandError(f"--engine {opts['engine']} serves embeddings only")
        pool = opts["pool"] or settings.INFERENCE_DEFAULT_POOL
        if opts["engine"] == "llamacpp":
            slots = opts["concurrency"] or 1
            engine_opts: dict[str, Any] = {
                "n_ctx": opts["n_ctx"],
                "slots": slots,
                "n_threads": opts["threads"] or max(1, (os.cpu_count() or 2) // slots),
                "prompt_cache_mb": settings.LLAMACPP_PROMPT_CACHE_MB
                if opts["prompt_cache_mb"] is None
                else opts["prompt_cache_mb"],
            }
            if opts["model_path"]:
                engine_opts["model_path"] = opts["model_path"]
        elif opts["engine"] == "vllm":
            engine_opts = {
                "max_concurrency": opts["concurrency"] or 8,
                "max_model_len": opts["max_model_len"],
                "kv_cache_gib": opts["kv_cache_gib"],
            }
            if opts["model"]:
                engine_opts["model_dir"] = opts["model"]
        elif opts["engine"] == "openai":
            if not opts["base_url"] or not opts["model"]:
                raise CommandError("--engine openai needs --base-url and --model")
            engine_opts = {
                "base_url": opts["base_url"],
                "model": opts["model"],
                "api_key": opts["api_key"] or os.environ.get("OPENAI_API_KEY"),
                "max_concurrency": opts["concurrency"] or 8,
            }
        else:
            engine_opts = {
                "delay_ms": opts["delay_ms"],
                "cycle": opts["cycle"],
                "first_delay_ms": opts["first_delay_ms"],
                "rest_delay_ms": opts["rest_delay_ms"],
            }
            if opts["script_text"]:
                engine_opts["text"] = opts["script_text"]
            if opts["script_tool_calls"]:
                engine_opts["tool_calls"] = json.loads(opts["script_tool_calls"])
            if opts["script_call_text"] is not None:
                engine_opts["call_text"] = opts["script_call_text"]
        try:
            engine = engine_create(opts["engine"], **engine_opts)
        except (ValueError, FileNotFoundError) as exc:
            raise CommandError(str(exc)) from exc
        worker = Worker(
            pool=pool,
            engine=engine,
            redis_url=settings.REDIS_URL,
            concurrency=opts["concurrency"],
            stream_ttl_s=settings.INFERENCE_STREAM_TTL_S,
            heartbeat_s=settings.INFERENCE_HEARTBEAT_S,
            worker_ttl_s=settings.INFERENCE_WORKER_TTL_S,
            reclaim_s=settings.INFERENCE_RECLAIM_S,
            affinity_wait_s=settings.INFERENCE_AFFINITY_WAIT_S,
            affinity_ttl_s=settings.INFERENCE_AFFINITY_TTL_S
            if settings.INFERENCE_AFFINITY
            else 0,
        )
        self._serve(worker)

    def _serve(self, worker: Worker) -> None:
        self.stdout.write(
            f"inference worker {worker.worker_id}: pool={worker.pool} "
            f"kind={worker.kind} engine={worker.engine.name}"
        )

        signals = 0

        def on_signal() -> None:
            nonlocal signals
            signals += 1
            worker.stop(abort_running=signals > 1)

        async def main() -> None:
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, on_signal)
            await worker.run(started=startup_freeze)

        try:
            asyncio.run(main())
        except EmbeddingDimensionError as exc:
            raise CommandError(str(exc)) from exc
        finally:
            metrics.process_exited()
        self.stdout.write(
            f"inference worker {worker.worker_id}: drained, {worker.jobs_done} jobs served"
        )
