"""bench/run_all.py's table writer: JSON lines from bench.record become one Markdown
table. No benchmark runs here."""

from __future__ import annotations

import json

from bench import record
from bench.run_all import results_read, table_render


def test_recorded_lines_become_one_markdown_table(tmp_path, monkeypatch):
    results = tmp_path / "results.jsonl"
    monkeypatch.setenv(record.RESULTS_ENV, str(results))
    record.bench_record(
        bench="sse_fanout",
        metric="frame gap p99",
        value=212.34567,
        unit="ms",
        params="N=1000, one daphne",
        goal="< 250 ms",
    )
    record.bench_record(bench="search", metric="search p50", value=3, unit="ms")
    record.bench_record(
        bench="retrieval", metric="recall@5", value=0.98, params="a | b"
    )

    page = table_render(
        rows=results_read(results.read_text(encoding="utf-8").splitlines()),
        header={"date": "2026-12-01 23:00 UTC", "commit": "abc1234 (clean tree)"},
        notes=["batching: skipped, needs the vLLM venv"],
    )

    assert page == (
        "# Benchmarks\n"
        "\n"
        "- date: 2026-12-01 23:00 UTC\n"
        "- commit: abc1234 (clean tree)\n"
        "\n"
        "| benchmark | metric | value | unit | params | goal |\n"
        "|---|---|---:|---|---|---|\n"
        "| sse_fanout | frame gap p99 | 212.346 | ms | N=1000, one daphne | < 250 ms |\n"
        "| search | search p50 | 3 | ms |  |  |\n"
        "| retrieval | recall@5 | 0.98 |  | a \\| b |  |\n"
        "\n"
        "Notes:\n"
        "\n"
        "- batching: skipped, needs the vLLM venv\n"
    )


def test_blank_lines_are_skipped_and_no_notes_means_no_notes_section():
    rows = results_read(
        ["", json.dumps({"bench": "b", "metric": "m", "value": 1.5}), "  "]
    )

    page = table_render(rows=rows, header={})

    assert page.splitlines()[-1] == "| b | m | 1.5 |  |  |  |"
    assert "Notes" not in page
