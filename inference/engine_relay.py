"""The worker's engine relay: a running job's output from the engine to its stream, and
its end.

A base class of :class:`~inference.worker.Worker` (like
:class:`~inference.recovery.CrashRecovery`), so the worker module stays the job's
path from queue to engine. Once the worker started a job (its ``meta`` event written),
:meth:`EngineRelay._stream` appends the engine's deltas and tool-call deltas through a
:class:`~inference.stream_writer.TokenWriter` (the worker's one writer for all its
jobs), then the terminal event: ``done`` with
exact usage and timings (ms), or ``error preempted`` for a background job stopped for
an interactive one (inference/intake.py); it records the job's metrics
(:mod:`inference.metrics`). An engine failure is raised to the worker, which ends the
job with an ``error`` event after the tokens already generated.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable
from typing import Any, cast

from inference import metrics, protocol
from inference.engines.base import Delta, Engine, Finish, ToolCallDelta
from inference.stream_writer import StreamWriter, TokenWriter


class EngineRelay:
    """Relay a job from the engine to its stream; the subclass provides the attributes
    used (the worker's ``engine``, ``kind`` and metric labels, the preempted and freed
    job sets, and the steps stubbed below, which the other bases define: this class
    comes last among them)."""

    engine: Engine
    kind: str
    _labels: dict[str, str]
    _preempted: set[str]
    _freed: set[str]
    _stream_writer: StreamWriter  # the worker's, shared by its running jobs

    def _busy(self) -> int:  # pragma: no cover - the Worker's
        raise NotImplementedError

    def _preemptible(self) -> list[str]:  # pragma: no cover - the intake's
        raise NotImplementedError

    async def _affinity_after(  # pragma: no cover - the affinity sweep's
        self, job: protocol.Job, busy: int, preemptible: int
    ) -> None:
        raise NotImplementedError

    async def _stream_ensure(  # pragma: no cover - the outage tolerance's
        self, job_id: str
    ) -> None:
        raise NotImplementedError

    async def _terminal(  # pragma: no cover - the Worker's
        self, job_id: str, event_type: str, payload: dict[str, Any]
    ) -> bool:
        raise NotImplementedError

    async def _stream(
        self, job: protocol.Job, opened: Awaitable[None] | None = None
    ) -> None:
        """Run ``job`` on the engine and write its output; with ``opened``, nothing
        is written before it is done (the worker's ``meta`` event is then written).

        The engine's generator is closed on the way out, whatever ends the relay (a
        cancel included), so its request stops with it.
        """
        itl = metrics.INTER_TOKEN_LATENCY.labels(**self._labels)
        tokens = TokenWriter(self._stream_writer, job.job_id)
        try:
            # every engine's generate is an async generator (it has aclose)
            engine_items = cast(
                AsyncGenerator[Delta | ToolCallDelta | Finish, None],
                self.engine.generate(job),
            )
            async with contextlib.aclosing(engine_items) as items:
                await self._relay(job, items, tokens, itl, opened)
            await tokens.flushed()
        except asyncio.CancelledError:
            raise
        except Exception:
            # the engine failed: what it generated before is written before its error
            with contextlib.suppress(Exception):
                await tokens.flushed()
            raise
        finally:
            await tokens.close()

    async def _relay(
        self,
        job: protocol.Job,
        items: AsyncIterator[Delta | ToolCallDelta | Finish],
        tokens: TokenWriter,
        itl: Any,
        opened: Awaitable[None] | None,
    ) -> None:
        """Append the engine's ``items`` (deltas through ``tokens``) and the job's
        terminal event, from the first item on once ``opened`` is done."""
        first_token_at: float | None = None
        last_at = 0.0
        async for item in items:
            if opened is not None:
                await opened
                opened = None
            if isinstance(item, Delta):
                now = time.time()
                if first_token_at is None:
                    first_token_at = now
                else:
                    itl.observe(now - last_at)
                last_at = now
                tokens.add(item.text)
            elif isinstance(item, ToolCallDelta):
                if first_token_at is None:
                    first_token_at = time.time()
                last_at = time.time()
                tokens.add_event(
                    protocol.tool_call_fields(
                        index=item.index,
                        id=item.id,
                        name=item.name,
                        arguments_delta=item.arguments,
                    )
                )
            elif isinstance(item, Finish):
                await tokens.flushed()
                if (
                    item.finish_reason == protocol.FINISH_CANCELLED
                    and job.job_id in self._preempted
                ):
                    await self._preempted_end(job)
                    continue
                end = time.time()
                origin = job.enqueued_at or end
                self._record_finish(job, item, first_token_at, end)
                if self.kind == "chat":
                    # before the terminal event: whoever reads it and sends the
                    # conversation's next turn finds this worker recorded and free
                    self._freed.add(job.job_id)
                    await self._affinity_after(
                        job, self._busy(), len(self._preemptible())
                    )
                await self._stream_ensure(job.job_id)
                await self._terminal(
                    job.job_id,
                    protocol.EVENT_DONE,
                    {
                        "finish_reason": item.finish_reason,
                        "usage": {
                            "prompt_tokens": item.usage.prompt_tokens,
                            "completion_tokens": item.usage.completion_tokens,
                            "cached_tokens": item.usage.cached_tokens,
                        },
                        "ttft_ms": int((first_token_at - origin) * 1000)
                        if first_token_at
                        else None,
                        "latency_ms": int((end - origin) * 1000),
                    },
                )

    async def _preempted_end(self, job: protocol.Job) -> None:
        """End a background job stopped for an interactive one (inference/intake.py):
        its caller sends it again, so nothing of it is billed or counted as done."""
        await self._stream_ensure(job.job_id)
        await self._terminal(
            job.job_id,
            protocol.EVENT_ERROR,
            {
                "code": protocol.ERROR_PREEMPTED,
                "message": "Stopped to free the model for a waiting request; "
                "it is sent again.",
                "usage": None,
            },
        )

    def _record_finish(
        self,
        job: protocol.Job,
        finish: Finish,
        first_token_at: float | None,
        end: float,
    ) -> None:
        labels = self._labels
        origin = job.enqueued_at or end
        if first_token_at is not None:
            metrics.TIME_TO_FIRST_TOKEN.labels(**labels).observe(
                max(0.0, first_token_at - origin)
            )
        metrics.E2E_LATENCY.labels(**labels).observe(max(0.0, end - origin))
        usage = finish.usage
        metrics.PROMPT_TOKENS.labels(**labels).inc(usage.prompt_tokens)
        metrics.GENERATION_TOKENS.labels(**labels).inc(usage.completion_tokens)
        metrics.PREFIX_CACHE_QUERIES.labels(**labels).inc(usage.prompt_tokens)
        metrics.PREFIX_CACHE_HITS.labels(**labels).inc(usage.cached_tokens)
        metrics.REQUEST_SUCCESS.labels(
            **labels, finished_reason=finish.finish_reason
        ).inc()
        if finish.finish_reason == protocol.FINISH_CANCELLED:
            metrics.REQUESTS_ABORTED.labels(**labels).inc()
