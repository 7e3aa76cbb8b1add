"""bench/capacity_model.py's arithmetic: the two-run fit and the fleet projection,
on made-up unit costs. No benchmark runs here."""

from __future__ import annotations

import math

import pytest

from bench.capacity_model import (
    Budgets,
    Fit,
    Peak,
    UnitCosts,
    fleet_project,
    frames_per_s,
    two_point_fit,
)


def _units(**changes):
    base = {
        "web": Fit(per_turn=0.010, per_x=10e-6),  # 10 ms a turn, 10 us a token
        "redis_ops": Fit(per_turn=40.0, per_x=1.5),
        "redis_bytes": Fit(per_turn=20_000.0, per_x=300.0),
        "worker": Fit(per_turn=0.002, per_x=20e-6),
        "pg_statements_per_turn": 30.0,
        "pg_xacts_per_turn": 6.0,
        "pg_wal_bytes_per_turn": 8_000.0,
        "web_idle_cores": 0.0,
        "redis_idle_ops_per_s": 10.0,
        "redis_idle_bytes_per_s": 1_000.0,
        "frames": Fit(per_turn=2.0, per_x=1.0),
    }
    return UnitCosts(**{**base, **changes})


def _by_name(rows):
    return {row.what: row for row in rows}


def test_two_point_fit_recovers_per_turn_and_per_token_costs():
    # y = 3 per turn + 0.5 per token
    fit = two_point_fit((10, 100, 10 * 3 + 100 * 0.5), (10, 600, 10 * 3 + 600 * 0.5))

    assert fit.per_turn == pytest.approx(3.0)
    assert fit.per_x == pytest.approx(0.5)
    assert fit.predict(turns=4, x=40) == pytest.approx(4 * 3 + 40 * 0.5)


def test_two_point_fit_refuses_runs_that_cannot_separate_the_costs():
    with pytest.raises(ValueError, match="cannot separate"):
        two_point_fit((10, 100, 5.0), (20, 200, 10.0))


def test_two_point_fit_clamps_a_negative_coefficient_to_zero():
    # noise makes the per-turn part negative: all of y goes to the per-token part
    fit = two_point_fit((10, 100, 9.0), (10, 600, 61.0))

    assert fit.per_turn == 0.0
    assert fit.per_x == pytest.approx(70.0 / 700)


def test_two_point_fit_never_returns_a_negative_cost():
    # idle-rate subtraction left both runs' totals below zero: the costs are zero
    fit = two_point_fit((10, 100, -5.0), (10, 600, -1.0))

    assert fit.per_turn >= 0.0
    assert fit.per_x >= 0.0


def test_frames_per_s_caps_token_frames_at_one_per_coalescing_interval():
    peak = Peak(messages_per_s=5_000, streams=25_000, tokens_per_s=2_500_000)
    every_token = Fit(per_turn=2, per_x=1.0)

    # 25,000 streams x 20 frames/s, plus meta and done of each turn
    assert frames_per_s(peak, Budgets(coalesce_ms=50), every_token) == (
        5_000 * 2 + 500_000
    )
    # held windows of 10 tokens: fewer frames than the cap
    windows = Fit(per_turn=2, per_x=0.1)
    assert frames_per_s(peak, Budgets(coalesce_ms=50), windows) == (5_000 * 2 + 250_000)


def test_projection_at_peak_follows_its_formulas():
    budgets = Budgets(
        web_core_target=0.5,
        redis_ops_per_shard=100_000,
        redis_bytes_per_shard=100e6,
        coalesce_ms=50,
        frames_per_s_per_process=8_000,
        gpu_models=(("model A", 10_000.0, 1), ("model B", 3_000.0, 4)),
    )
    rows = _by_name(fleet_project(_units(), Peak(), budgets))

    frames = 5_000 * 2 + 500_000
    assert rows["SSE frames/s"].value == frames
    cores = 5_000 * 0.010 + 2_500_000 * 10e-6  # 50 + 25
    assert rows["web CPU"].value == pytest.approx(cores)
    # by CPU: ceil(75 / 0.5) = 150; by the frame cap: ceil(510,000 / 8,000) = 64
    assert rows["web processes (1 core each)"].value == 150
    ops = 5_000 * 40 + 2_500_000 * 1.5 + 150 * 10
    assert rows["Redis commands/s"].value == pytest.approx(ops)
    nbytes = 5_000 * 20_000 + 2_500_000 * 300 + 150 * 1_000
    assert rows["Redis bytes/s (in + out)"].value == pytest.approx(nbytes / 1e6)
    # by ops: ceil(3,951,500 / 100,000) = 40; by bytes: ceil(850.15 MB/s / 100) = 9
    assert rows["Redis shards (masters)"].value == 40
    assert rows["PostgreSQL statements/s"].value == 150_000
    assert rows["PostgreSQL transactions/s"].value == 30_000
    assert rows["PostgreSQL WAL"].value == pytest.approx(40.0)
    assert rows["worker CPU outside the engine"].value == pytest.approx(
        5_000 * 0.002 + 2_500_000 * 20e-6
    )
    assert rows["GPUs, all tokens on model A"].value == 250
    assert rows["GPUs, all tokens on model B"].value == math.ceil(2_500_000 / 3_000) * 4
    assert "ceil(tokens/s / 3,000 per replica) x 4 GPU" in (
        rows["GPUs, all tokens on model B"].formula
    )


def test_projection_takes_the_frame_cap_when_frames_bind_before_cpu():
    cheap = _units(web=Fit(per_turn=0.0001, per_x=1e-6))
    rows = _by_name(
        fleet_project(cheap, Peak(), Budgets(frames_per_s_per_process=8_000))
    )

    assert rows["web processes (1 core each)"].value == math.ceil(510_000 / 8_000)


def test_projection_without_pg_stat_statements_shows_transactions_only():
    rows = _by_name(
        fleet_project(_units(pg_statements_per_turn=None), Peak(), Budgets())
    )

    assert "PostgreSQL statements/s" not in rows
    assert rows["PostgreSQL transactions/s"].value == 30_000
