"""`manage.py run_inference_worker --pool NAME --engine llamacpp|scripted [--concurrency N]`."""

from __future__ import annotations

import asyncio
import signal
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from inference.engines import engine_create
from inference.worker import Worker


class Command(BaseCommand):
    help = "Serve one inference pool from Redis with one engine (SIGTERM drains gracefully)."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "--pool", default=None, help="pool name (default: INFERENCE_DEFAULT_POOL)"
        )
        parser.add_argument(
            "--engine", default="llamacpp", choices=["llamacpp", "scripted"]
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
            "--model-path", default=None, help="GGUF file (default: bundled SmolLM2)"
        )
        parser.add_argument(
            "--delay-ms", type=float, default=20.0, help="scripted engine: ms per token"
        )
        parser.add_argument(
            "--script-text", default=None, help="scripted engine: answer text"
        )
        parser.add_argument(
            "--cycle",
            action="store_true",
            help="scripted engine: repeat the text until max_tokens",
        )

    def handle(self, *args: Any, **opts: Any) -> None:
        pool = opts["pool"] or settings.INFERENCE_DEFAULT_POOL
        if opts["engine"] == "llamacpp":
            engine_opts: dict[str, Any] = {
                "n_ctx": opts["n_ctx"],
                "slots": opts["concurrency"] or 1,
            }
            if opts["model_path"]:
                engine_opts["model_path"] = opts["model_path"]
        else:
            engine_opts = {"delay_ms": opts["delay_ms"], "cycle": opts["cycle"]}
            if opts["script_text"]:
                engine_opts["text"] = opts["script_text"]
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
        )
        self.stdout.write(
            f"inference worker {worker.worker_id}: pool={pool} engine={engine.name}"
        )

        async def main() -> None:
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, worker.stop)
            await worker.run()

        asyncio.run(main())
        self.stdout.write(
            f"inference worker {worker.worker_id}: drained, {worker.jobs_done} jobs served"
        )
