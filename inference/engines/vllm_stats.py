"""The vLLM engine's scheduler figures: the engine core's running and waiting
requests, read through a stat logger vLLM calls every step (inference/metrics.py
reports them).
"""

from __future__ import annotations

from typing import Any


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


def stat_logger_factory(counts: SchedulerCounts) -> Any:
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
