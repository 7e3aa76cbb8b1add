"""bench/hot_path_table.py: the hot-path goal table puts each goal beside the run's
row (met or not, units converted), says why a goal has no figure, and lists the rows
no goal asked for. No benchmark runs here."""

from __future__ import annotations

import argparse
import json

import pytest

from bench import hot_path
from bench.hot_path_table import (
    GOALS,
    Goal,
    PartOutcome,
    table_render,
    value_format,
    verdict,
)
from bench.run_all import table_render as run_all_render

PIN = "daphne on core 0; client, worker, Redis, PostgreSQL on core 1"


def _row(measure: str, value: object, unit: str, params: str = "N=200") -> dict:
    return {
        "measure": measure,
        "value": value,
        "unit": unit,
        "pinning": PIN,
        "params": params,
        "goal": "",
    }


def _goal(measure: str) -> Goal:
    return next(g for g in GOALS if g.measure == measure)


def _line(page: str, start: str) -> list[str]:
    """The cells of the table line that starts with ``| start``."""
    line = next(x for x in page.splitlines() if x.startswith(f"| {start} |"))
    return [cell.strip() for cell in line.strip("|").split(" | ")]


@pytest.mark.parametrize(
    ("value", "unit", "expected"),
    [
        (99.5, "us", "yes"),
        (100, "us", "yes"),
        (100.5, "us", "no"),
        (0.0995, "ms", "yes"),  # converted to the goal's µs
        (0.2, "ms", "no"),
        ("not reported (load core saturated)", "us", "n/a"),
        (float("nan"), "us", "n/a"),
        (50, "streams", "n/a"),  # a unit that is no time
    ],
)
def test_a_figure_meets_its_goal_in_the_goals_unit(value, unit, expected):
    goal = _goal("web CPU per SSE frame, pinned")

    assert verdict(goal, _row(goal.match, value, unit)) == expected


def test_at_least_goals_and_ratios_compare_the_other_way():
    rps = _goal("API at c=50: requests/s vs LiteLLM")
    threads = _goal("threads held by the web process per open stream")

    assert verdict(rps, _row(rps.match, 3.1, "x")) == "yes"
    assert verdict(rps, _row(rps.match, 2.27, "")) == "no"
    assert verdict(threads, _row(threads.match, 0.045, "threads")) == "yes"
    assert verdict(threads, _row(threads.match, 1.0, "threads")) == "no"
    assert verdict(threads, None) == "—"


def test_each_goal_sits_beside_its_row_with_pinning_params_and_todays_figure():
    parts = {
        "sse": PartOutcome(
            "sse",
            rows=[
                _row("web CPU per SSE frame, pinned", 123.4, "us"),
                _row("done lag when 200 answers end together, p99", 1500, "ms"),
                _row("frame gap p99", 140.2, "ms"),
            ],
            seconds=61,
            ran=True,
        ),
        "turn": PartOutcome(
            "turn",
            rows=[_row("web CPU per plain turn (POST to first frame)", 5.5, "ms")],
            ran=True,
        ),
    }

    page = table_render(parts=parts, header={"date": "2026-12-04 23:00 UTC"})

    assert page.startswith("# The web tier's hot path: goals side by side\n")
    assert "- date: 2026-12-04 23:00 UTC" in page
    assert _line(page, "web CPU per SSE frame, pinned") == [
        "web CPU per SSE frame, pinned",
        "270 µs (200 streams), 408 µs (1,000)",
        "123 µs",
        "≤ 100 µs",
        "no",
        PIN,
        "N=200",
    ]
    lag = _line(page, "done lag when 1,000 answers end together, p99")
    assert lag[1:5] == [
        "17.7 s",
        "1,500 ms",
        "≤ 2 s",
        "yes, at a smaller size than the goal's 1,000 answers",
    ]
    assert lag[6] == "as measured: done lag when 200 answers end together, p99; N=200"
    assert _line(page, "web CPU per plain turn (POST to first frame)")[2:5] == [
        "5.50 ms",
        "≤ 6 ms",
        "yes",
    ]
    # a row no goal asked for is listed under the goals, with its pinning
    beside = page.split("Beside the goals:")[1]
    assert _line(beside, "frame gap p99") == [
        "frame gap p99",
        "140 ms",
        "",
        PIN,
        "N=200",
    ]
    assert "part sse: 61 s" in page


def test_a_goal_without_a_row_says_not_measured_and_why():
    parts = {
        "sse": PartOutcome("sse", notes=["stopped at its 180 s limit"]),
        "api": PartOutcome(
            "api",
            rows=[_row("API admission p50 at c=1", 2.5, "ms")],
            notes=["no LiteLLM venv (.venv-litellm): ours measured alone"],
            ran=True,
        ),
        "moderation": PartOutcome(
            "moderation",
            notes=["skipped, bench/api_moderation_cost.py has no hot_path_rows() yet"],
        ),
    }

    page = table_render(parts=parts, header={})

    assert _line(page, "API admission p50 at c=1 (moderation off)")[2:5] == [
        "2.50 ms",
        "≤ 3 ms",
        "yes",
    ]
    ratio = _line(page, "API added TTFT vs LiteLLM at c=1, p50")
    assert ratio[2:5] == ["not measured", "≤ 0.6×", "—"]
    notes = page.split("Notes:")[1]
    assert (
        "- API added TTFT vs LiteLLM at c=1, p50: part api returned no row "
        "'API added TTFT vs LiteLLM p50 at c=1' (no LiteLLM venv (.venv-litellm): "
        "ours measured alone)"
    ) in notes
    assert (
        "- web CPU per SSE frame, pinned: part sse: stopped at its 180 s limit"
    ) in notes
    assert "part moderation: skipped, bench/api_moderation_cost.py has no " in notes
    assert "- 100 users at once on one process, turn overhead p50: part turn: " in (
        notes
    )
    assert "Beside the goals" not in page
    # every goal has its line, in the order
    lines = [x for x in page.splitlines() if x.startswith("| ")][1:]
    assert [x.split(" | ")[0][2:] for x in lines] == [g.measure for g in GOALS]


@pytest.mark.parametrize(
    ("value", "unit", "text"),
    [
        (1234.5, "ms", "1,234 ms"),
        (12.34, "ms", "12.3 ms"),
        (0.0451, "threads", "0.045 threads"),
        (1.02, "x", "1.02×"),
        (0, "", "0.00"),
        ("not reported", "streams", "not reported streams"),
    ],
)
def test_figures_are_written_with_about_three_digits(value, unit, text):
    assert value_format(value, unit) == text


def test_run_all_page_carries_the_hot_path_table_above_its_own():
    section = table_render(parts={}, header={"date": "d"})

    page = run_all_render(
        rows=[{"bench": "search", "metric": "p50", "value": 3}],
        header={"commit": "abc"},
        section=section,
    )

    assert page.splitlines()[:5] == [
        "# Benchmarks",
        "",
        "- commit: abc",
        "",
        "## The web tier's hot path: goals side by side",
    ]
    assert page.index("## Every benchmark's figures") < page.index("| search | p50 |")


def test_a_part_process_writes_its_rows_or_says_it_has_no_function(
    tmp_path, monkeypatch, capsys
):
    rows = [_row("web CPU per SSE frame, pinned", 90, "us")]
    monkeypatch.setitem(hot_path.RUNNERS, "sse", lambda args: rows)
    out = tmp_path / "rows.json"

    hot_path.part_main(argparse.Namespace(part="sse", rows_out=out))

    assert json.loads(out.read_text()) == rows

    def missing(args):
        raise LookupError("bench/api_moderation_cost.py has no hot_path_rows() yet")

    monkeypatch.setitem(hot_path.RUNNERS, "moderation", missing)
    with pytest.raises(SystemExit) as exited:
        hot_path.part_main(argparse.Namespace(part="moderation", rows_out=out))

    assert exited.value.code == 3
    assert capsys.readouterr().out.endswith(
        "hot-path-skip: bench/api_moderation_cost.py has no hot_path_rows() yet\n"
    )


def test_the_moderation_part_calls_its_bench_with_every_option_it_reads(monkeypatch):
    """hot_path's moderation part hands api_moderation_cost the options of that
    bench's own parser (a hand-built namespace lacked ``profile``: the part died)."""
    from bench import api_moderation_cost

    called: dict = {}

    class Measured(Exception):
        pass

    def measure(n, *, pin, profile):
        called.update(n=n, pin=pin, profile=profile)
        raise Measured

    monkeypatch.setattr(api_moderation_cost, "measure", measure)
    with pytest.raises(Measured):
        hot_path._moderation(argparse.Namespace(moderation_n=3))
    assert called == {"n": 3, "pin": True, "profile": None}


def test_a_goal_set_at_a_size_says_when_the_row_was_measured_at_another():
    """The done lag's goal is at 1,000 answers: the quick run's 200 meets the figure
    but the verdict says it was a smaller size; at 1,000 it is a plain yes/no."""
    goal = _goal("done lag when 1,000 answers end together, p99")
    small = {"measure": "done lag when 200 answers end together, p99"}
    full = {"measure": "done lag when 1,000 answers end together, p99"}

    assert verdict(goal, {**small, "value": 475, "unit": "ms"}) == (
        "yes, at a smaller size than the goal's 1,000 answers"
    )
    assert verdict(goal, {**full, "value": 9.0, "unit": "s"}) == "no"
    assert verdict(goal, {**full, "value": 1.5, "unit": "s"}) == "yes"


def test_a_load_bound_row_is_shown_but_not_judged():
    goal = _goal("API at c=50: requests/s vs LiteLLM")
    row = _row("API requests/s vs LiteLLM at c=50", 2.0, "x")
    assert verdict(goal, row) == "no"
    row["bound"] = "load-bound: load core 97% (ours) busy"
    assert verdict(goal, row) == "not judged: load-bound: load core 97% (ours) busy"
    page = table_render(
        parts={"api": PartOutcome("api", rows=[row], ran=True)}, header={}
    )
    line = next(x for x in page.splitlines() if x.startswith(f"| {goal.measure}"))
    assert "| 2.00× |" in line
    assert "not judged: load-bound" in line
