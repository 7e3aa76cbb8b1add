"""The web tier's hot-path goal table: the issue's measures, its figures of the day
the goals were set, the goals, and how a run's rows are set beside them.

:data:`GOALS` is the table's fixed part: each :class:`Goal` names the measure, the
figure it had when the goal was set (``today``: a constant, from
bench/results/2026-12-03-534aade.md and the pinned re-run of the same day), the goal
in words and as a comparison (``op``, ``limit``, ``unit``), and which part of
bench/hot_path.py measures it and under which row name (``match``: a bench row's
``measure``, or its start when it ends with ``*``).

A bench row is a dict ``{measure, value, unit, pinning, params, goal}`` (what the
benches' ``hot_path_rows()`` return), with ``bound`` when its figure is no verdict
on the web tier (the load side limited it: :func:`verdict`). :func:`table_render` puts each goal beside the
run's row (now, met?) and lists the rows no goal asked for under it; a goal no row
answered says so, with why (:class:`PartOutcome` notes).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Seconds per unit, for comparing a value with a goal set in another time unit.
_TIME_UNITS = {"us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0}
# Units that mean the same bare number (a ratio).
_RATIO_UNITS = {"", "x", "×"}
# Below this many threads per open stream the web process holds no thread per
# stream: what remains is its fixed pools grown by a few threads over N streams.
THREADS_PER_STREAM_ZERO = 0.05


@dataclass(frozen=True)
class Goal:
    """One row of the issue's goal table (module docstring)."""

    measure: str
    today: str
    goal: str
    part: str
    match: str
    op: str
    limit: float
    unit: str
    # the size the goal is set at ("1,000 answers"): a row measured at another size
    # (its measure does not name it) is judged with that said
    size: str = ""

    def matches(self, measure: str) -> bool:
        """Whether a bench row named ``measure`` answers this goal."""
        if self.match.endswith("*"):
            return measure.startswith(self.match[:-1])
        return measure == self.match


def _g(*args: Any) -> Goal:
    return Goal(*args)


# The goal table, in its order; "today" as the issue states it.
GOALS: list[Goal] = [
    _g("web CPU per SSE frame, pinned", "270 µs (200 streams), 408 µs (1,000)",
       "≤ 100 µs", "sse", "web CPU per SSE frame*", "<=", 100, "us"),
    _g("streams per web core, frame gap p99 < 250 ms",
       "between 200 and 1,000 (load-bound)", "≥ 2,000", "sse",
       "streams per web core*", ">=", 2000, "streams"),
    _g("threads held by the web process per open stream",
       "1 (1,005 at 1,000 streams)", "0: waiting costs no thread", "sse",
       "threads held by the web process per open stream", "<",
       THREADS_PER_STREAM_ZERO, "threads"),
    _g("done lag when 1,000 answers end together, p99", "17.7 s", "≤ 2 s", "sse",
       "done lag when*", "<=", 2, "s", "1,000 answers"),
    _g("web CPU per plain turn (POST to first frame)", "~18 ms", "≤ 6 ms", "turn",
       "web CPU per plain turn (POST to first frame)", "<=", 6, "ms"),
    _g("100 users at once on one process, turn overhead p50", "1.8 s", "≤ 0.6 s",
       "turn", "100 users at once, turn overhead p50", "<=", 0.6, "s"),
    _g("API admission p50 at c=1 (moderation off)", "12.7 ms", "≤ 3 ms", "api",
       "API admission p50 at c=1", "<=", 3, "ms"),
    _g("API admission p50 at c=50 (moderation off)", "505 ms", "≤ 60 ms", "api",
       "API admission p50 at c=50", "<=", 60, "ms"),
    _g("API added TTFT vs LiteLLM at c=1, p50", "1.02×", "≤ 0.6×", "api",
       "API added TTFT vs LiteLLM p50 at c=1", "<=", 0.6, "x"),
    _g("API added TTFT vs LiteLLM at c=1, p99", "1.24×", "≤ 0.6×", "api",
       "API added TTFT vs LiteLLM p99 at c=1", "<=", 0.6, "x"),
    _g("input moderation's own cost on a turn p50, verdict cache hit",
       "not reported apart", "≤ 3 ms", "turn",
       "input moderation per turn p50, verdict cache hit", "<=", 3, "ms"),
    _g("input moderation's own cost on a turn p50, verdict cache miss",
       "not reported apart", "≤ 15 ms", "turn",
       "input moderation per turn p50, verdict cache miss", "<=", 15, "ms"),
    _g("input moderation's own cost on an API request p50, verdict cache hit",
       "not reported apart", "≤ 3 ms", "moderation",
       "input moderation's own cost, API hit, p50", "<=", 3, "ms"),
    _g("input moderation's own cost on an API request p50, verdict cache miss",
       "not reported apart", "≤ 15 ms", "moderation",
       "input moderation's own cost, API miss, p50", "<=", 15, "ms"),
    _g("API at c=50: overhead vs LiteLLM", "0.33×", "≤ 0.2×", "api",
       "API added TTFT vs LiteLLM p50 at c=50", "<=", 0.2, "x"),
    _g("API at c=50: requests/s vs LiteLLM", "2.27×", "≥ 3×", "api",
       "API requests/s vs LiteLLM at c=50", ">=", 3, "x"),
]  # fmt: skip


@dataclass
class PartOutcome:
    """One part's run: its rows and what went wrong or is worth saying (notes)."""

    name: str
    rows: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    ran: bool = False


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if math.isnan(value):
        return None
    return float(value)


def _in_unit(value: float, unit: str, target: str) -> float | None:
    """``value`` in ``unit`` converted to ``target``; None when they do not convert."""
    if unit == target or (unit in _RATIO_UNITS and target in _RATIO_UNITS):
        return value
    if unit in _TIME_UNITS and target in _TIME_UNITS:
        return value * _TIME_UNITS[unit] / _TIME_UNITS[target]
    return None


def verdict(goal: Goal, row: Mapping[str, Any] | None) -> str:
    """Whether ``row`` meets ``goal``: "yes", "no", "n/a" (no number to compare, or
    a unit that does not convert to the goal's), "—" (no row) or "not judged: ..."
    (the row's ``bound``: why its figure measured the benchmark's load side, not
    the web tier)."""
    if row is None:
        return "—"
    if row.get("bound"):
        return f"not judged: {row['bound']}"
    value = _number(row.get("value"))
    if value is None:
        return "n/a"
    value = _in_unit(value, str(row.get("unit", "")), goal.unit)
    if value is None:
        return "n/a"
    met = {
        "<=": value <= goal.limit,
        "<": value < goal.limit,
        ">=": value >= goal.limit,
        ">": value > goal.limit,
    }[goal.op]
    said = "yes" if met else "no"
    if goal.size and goal.size not in str(row.get("measure", "")):
        return f"{said}, at a smaller size than the goal's {goal.size}"
    return said


def value_format(value: Any, unit: str = "") -> str:
    """A figure for the table: about 3 significant digits, thousands grouped, with
    its unit ("123 us" becomes "123 µs"; a ratio "0.42×")."""
    number = _number(value)
    if number is None:
        text = "NaN" if isinstance(value, float) else str(value)
    elif abs(number) >= 100:
        text = f"{number:,.0f}"
    elif abs(number) >= 10:
        text = f"{number:.1f}"
    elif abs(number) >= 1 or number == 0:
        text = f"{number:.2f}"
    else:
        text = f"{number:.3f}"
    unit = {"us": "µs", "x": "×"}.get(unit, unit)
    if not unit:
        return text
    return text + unit if unit == "×" else f"{text} {unit}"


def _cell(value: object) -> str:
    return str(value).replace("\n", " ").replace("|", "\\|")


def rows_split(
    goals: list[Goal], rows: Iterable[Mapping[str, Any]]
) -> tuple[list[tuple[Goal, Mapping[str, Any] | None]], list[Mapping[str, Any]]]:
    """Pair each goal with the first row that answers it (None: none did); return
    the pairs and the rows no goal took, in their order."""
    rows = list(rows)
    taken: set[int] = set()
    pairs = []
    for goal in goals:
        found = None
        for i, row in enumerate(rows):
            if i not in taken and goal.matches(str(row.get("measure", ""))):
                found = row
                taken.add(i)
                break
        pairs.append((goal, found))
    return pairs, [row for i, row in enumerate(rows) if i not in taken]


def missing_reason(goal: Goal, parts: Mapping[str, PartOutcome]) -> str:
    """Why no row answered ``goal``: its part's notes, or that the part ran and
    returned no row of that name."""
    part = parts.get(goal.part)
    if part is None or not part.ran:
        said = "; ".join(part.notes) if part and part.notes else "not run"
        return f"part {goal.part}: {said}"
    tail = f" ({'; '.join(part.notes)})" if part.notes else ""
    return f"part {goal.part} returned no row {goal.match!r}{tail}"


def table_render(
    *,
    parts: Mapping[str, PartOutcome],
    header: Mapping[str, str],
    goals: list[Goal] = GOALS,
) -> str:
    """The Markdown page: a title, ``header`` as bullets, the goal table (measure |
    today | now | goal | met? | pinning | params), the other rows the parts returned,
    then notes: why a goal has no figure, and each part's notes."""
    rows = [row for part in parts.values() for row in part.rows]
    pairs, others = rows_split(goals, rows)
    out = ["# The web tier's hot path: goals side by side", ""]
    out += [f"- {key}: {value}" for key, value in header.items()]
    out += [
        "",
        "| measure | today | now | goal | met? | pinning | params |",
        "|---|---|---:|---|---|---|---|",
    ]
    notes = []
    for goal, row in pairs:
        if row is None:
            now = "not measured"
            pinning = params = ""
            notes.append(f"{goal.measure}: {missing_reason(goal, parts)}")
        else:
            now = value_format(row.get("value"), str(row.get("unit", "")))
            pinning = str(row.get("pinning", ""))
            params = str(row.get("params", ""))
            if row.get("measure") != goal.measure:
                params = f"as measured: {row.get('measure')}; {params}"
        cells = [goal.measure, goal.today, now, goal.goal, verdict(goal, row)]
        out.append(
            "| " + " | ".join(_cell(c) for c in [*cells, pinning, params]) + " |"
        )
    if others:
        out += ["", "Beside the goals:", ""]
        out += [
            "| measure | value | goal | pinning | params |",
            "|---|---:|---|---|---|",
        ]
        for row in others:
            cells = [
                row.get("measure", ""),
                value_format(row.get("value"), str(row.get("unit", ""))),
                row.get("goal", ""),
                row.get("pinning", ""),
                row.get("params", ""),
            ]
            out.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    notes.append(
        "threads per open stream counts as 0 below "
        f"{THREADS_PER_STREAM_ZERO} (fixed pools grown by a few threads over N streams)"
    )
    for name, part in parts.items():
        if part.ran or part.notes:
            ran = f"{part.seconds:.0f} s" if part.seconds else "not run"
            notes.append(f"part {name}: {'; '.join([ran, *part.notes])}")
    out += ["", "Notes:", ""] + [f"- {_cell(n)}" for n in notes]
    return "\n".join(out) + "\n"


def page_beside(results: Path) -> Path:
    """Where bench/hot_path.py leaves a copy of its page for bench/run_all.py: next
    to run_all's ``results`` file (its BENCH_RESULTS)."""
    return results.with_name("hot-path.md")
