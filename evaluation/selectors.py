"""Reads of evaluation: a run's summary and the comparison of two runs.

Pass rate interval: the Wilson score interval at 95 % (z = 1.96) over all case runs
of the run (cases × repeats, each counted as one Bernoulli trial). Repeats of one case
are not independent of each other, so with ``repeat`` > 1 the interval is somewhat too
narrow; it is the usual, documented simplification. Latency percentiles are
nearest-rank over the case runs that produced an answer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from decimal import Decimal

from evaluation.models import EvalResult, EvalRun

Z_95 = 1.96


def wilson_interval(passed: int, total: int, *, z: float = Z_95) -> tuple[float, float]:
    """Return the Wilson score interval (low, high), fractions 0-1, for ``passed`` of
    ``total`` trials; (0, 0) for no trial."""
    if total <= 0:
        return 0.0, 0.0
    p = passed / total
    denominator = 1 + z * z / total
    centre = (p + z * z / (2 * total)) / denominator
    half = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total))
    half /= denominator
    return max(0.0, centre - half), min(1.0, centre + half)


def percentile(values: list[int], q: float) -> int | None:
    """Nearest-rank percentile ``q`` (0-100) of ``values``; None if empty."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


@dataclass
class RunSummary:
    """What ``run_eval`` and the admin show of a run. Times in ms, cost in currency."""

    run: EvalRun
    case_runs: int = 0
    passed: int = 0
    errors: int = 0
    low: float = 0.0
    high: float = 0.0
    p50_ms: int | None = None
    p99_ms: int | None = None
    ttft_p50_ms: int | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: Decimal = Decimal("0")
    # case name -> passes out of repeats
    by_case: dict[str, tuple[int, int]] = field(default_factory=dict)

    @property
    def pass_rate(self) -> float:
        """Passed case runs over all case runs (0-1)."""
        return self.passed / self.case_runs if self.case_runs else 0.0


def run_summary(*, run: EvalRun) -> RunSummary:
    """Summarise ``run``'s results (see the module docstring for the statistics)."""
    results = list(
        EvalResult.objects.filter(run=run)
        .select_related("case")
        .order_by("case__ordinal", "case_id", "repeat_index")
    )
    summary = RunSummary(run=run, case_runs=len(results))
    latencies, ttfts = [], []
    for result in results:
        summary.passed += result.passed
        summary.errors += bool(result.error)
        if result.latency_ms is not None and not result.error:
            latencies.append(result.latency_ms)
        if result.ttft_ms is not None:
            ttfts.append(result.ttft_ms)
        summary.prompt_tokens += result.prompt_tokens
        summary.completion_tokens += result.completion_tokens
        summary.cost += result.cost
        ok, n = summary.by_case.get(result.case.name, (0, 0))
        summary.by_case[result.case.name] = (ok + result.passed, n + 1)
    summary.low, summary.high = wilson_interval(summary.passed, summary.case_runs)
    summary.p50_ms = percentile(latencies, 50)
    summary.p99_ms = percentile(latencies, 99)
    summary.ttft_p50_ms = percentile(ttfts, 50)
    return summary


@dataclass
class CaseDiff:
    """A case whose outcome differs between two runs: passes out of repeats in each,
    and one output of each (the first repeat's)."""

    name: str
    a: tuple[int, int]
    b: tuple[int, int]
    output_a: str = ""
    output_b: str = ""


def runs_compare(
    *, a: EvalRun, b: EvalRun
) -> tuple[RunSummary, RunSummary, list[CaseDiff]]:
    """Summaries of runs ``a`` and ``b`` and the cases whose pass share differs
    (cases present in only one run count as 0 of 0 in the other)."""
    sa, sb = run_summary(run=a), run_summary(run=b)
    outputs: dict[tuple[int, str], str] = {}
    for run in (a, b):
        for name, output in EvalResult.objects.filter(
            run=run, repeat_index=0
        ).values_list("case__name", "output"):
            outputs[(run.pk, name)] = output
    diffs = []
    for name in list(dict.fromkeys([*sa.by_case, *sb.by_case])):
        ra, rb = sa.by_case.get(name, (0, 0)), sb.by_case.get(name, (0, 0))
        share_a = ra[0] / ra[1] if ra[1] else None
        share_b = rb[0] / rb[1] if rb[1] else None
        if share_a != share_b:
            diffs.append(
                CaseDiff(
                    name=name,
                    a=ra,
                    b=rb,
                    output_a=outputs.get((a.pk, name), ""),
                    output_b=outputs.get((b.pk, name), ""),
                )
            )
    return sa, sb, diffs
