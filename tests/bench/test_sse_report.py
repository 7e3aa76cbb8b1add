"""bench/sse_report.py's ramp: doubling to the first failure, then bisecting between
the last pass and that failure, bounded in steps; no ceiling where the load side
limited a step."""

from __future__ import annotations

import argparse

import pytest

from bench.hot_path import LIMITS_S, RAMP_STEP_LIMIT_S, part_limit_s
from bench.sse_report import ramp_next, ramp_result, step_verdict

GAP_FAIL = "frame gap p99 284 ms >= 250 ms (web core 77% busy, web 0.62 core)"
LOAD_FAIL = "load core saturated (95% busy): not web-bound"


def _ramp(verdict, *, start=200, most=4000, max_steps=8):
    """Run the ramp against a fake bench: ``verdict(n)`` is step n's failure."""
    steps: list[tuple[int, str]] = []
    while n := ramp_next(steps, start=start, most=most, max_steps=max_steps):
        steps.append((n, verdict(n)))
    return [n for n, _why in steps], ramp_result(steps)


def test_it_doubles_to_the_first_failure_then_bisects_to_200_streams():
    ns, (ceiling, why) = _ramp(lambda n: GAP_FAIL if n > 2100 else "")
    assert ns == [200, 400, 800, 1600, 3200, 2400, 2000, 2200]
    assert ceiling == 2000
    assert why == f"N=2200: {GAP_FAIL}"


def test_it_bisects_upwards_when_the_midpoint_passes():
    ns, (ceiling, why) = _ramp(lambda n: GAP_FAIL if n > 3000 else "")
    assert ns == [200, 400, 800, 1600, 3200, 2400, 2800, 3000]
    assert (ceiling, why) == (3000, f"N=3200: {GAP_FAIL}")


def test_the_resolution_is_200_streams_or_a_tenth_of_the_last_pass():
    # 200 passes, 400 fails: within 200 streams, no step between
    ns, (ceiling, _why) = _ramp(lambda n: GAP_FAIL if n > 300 else "")
    assert ns == [200, 400]
    assert ceiling == 200
    steps = [(6400, ""), (12800, GAP_FAIL), (9600, ""), (11200, GAP_FAIL)]
    # 9,600 .. 11,200: 1,600 apart, more than 10 % of 9,600: one more step
    assert ramp_next(steps, start=6400, most=20000, max_steps=9) == 10400
    steps.append((10400, GAP_FAIL))  # 800 apart, under 960: done
    assert ramp_next(steps, start=6400, most=20000, max_steps=9) is None


def test_a_load_bound_step_bounds_the_bisection_and_no_ceiling_sits_under_one():
    # 3,200 load-bound: the ramp bisects below it and finds the web's failure
    verdict = {3200: LOAD_FAIL, 2400: GAP_FAIL, 2200: GAP_FAIL}
    ns, (ceiling, why) = _ramp(lambda n: verdict.get(n, ""))
    assert ns == [200, 400, 800, 1600, 3200, 2400, 2000, 2200]
    assert (ceiling, why) == (2000, f"N=2200: {GAP_FAIL}")
    # the step just above the last pass was load-bound: no ceiling is reported
    verdict = {3200: GAP_FAIL, 2400: GAP_FAIL, 2000: LOAD_FAIL, 1800: LOAD_FAIL}
    ns, (ceiling, why) = _ramp(lambda n: verdict.get(n, ""))
    assert ns == [200, 400, 800, 1600, 3200, 2400, 2000, 1800]
    assert ceiling is None
    assert why == f"N=1800: {LOAD_FAIL} (passed up to N=1600)"
    ns, (ceiling, why) = _ramp(lambda n: LOAD_FAIL)
    assert (ns, ceiling, why) == ([200], None, f"N=200: {LOAD_FAIL} (no step passed)")


def test_the_ramp_stops_at_its_step_limit_and_at_its_most_streams():
    ns, (ceiling, why) = _ramp(lambda n: GAP_FAIL if n > 2100 else "", max_steps=6)
    assert ns == [200, 400, 800, 1600, 3200, 2400]
    assert (ceiling, why) == (1600, f"N=2400: {GAP_FAIL}")
    ns, (ceiling, why) = _ramp(lambda n: "")
    assert ns == [200, 400, 800, 1600, 3200, 4000]  # not 6,400: --ramp-max 4,000
    assert ceiling == 4000
    assert why.startswith("ramp ended before a step failed")


def test_a_first_step_that_fails_gives_a_ceiling_of_none_passed():
    ns, (ceiling, why) = _ramp(lambda n: GAP_FAIL)
    assert ns == [200]
    assert (ceiling, why) == (0, f"N=200: {GAP_FAIL}")


@pytest.mark.parametrize(
    ("overrides", "starts"),
    [
        ({}, ""),
        ({"completed": 990, "errors": {"timeout": 10}}, "10 streams did not complete"),
        ({"load_core_busy": 0.95, "gap_p99": 400.0}, "load core saturated (95% busy"),
        ({"load_core_busy": 0.95}, ""),  # the gap held: the pass holds
        ({"gap_p99": 284.0}, "frame gap p99 284 ms >= 250 ms (web core 77% busy"),
    ],
)
def test_a_steps_verdict_says_what_failed_first(overrides, starts):
    r = {"n": 1000, "completed": 1000, "errors": {}, "load_core_busy": 0.7,
         "gap_p99": 200.0, "web_core_busy": 0.77, "web_cores": 0.62,
         "late_ticks": 58, "load_cores_ours": 0.6, **overrides}  # fmt: skip
    verdict = step_verdict(r)
    assert verdict.startswith(starts) if starts else verdict == ""
    if verdict.startswith("frame gap"):
        assert "load core 70% busy, worker 58 ticks late" in verdict
    if verdict.startswith("load core"):
        assert "frame gap p99 400 ms >= 250 ms): not web-bound" in verdict


def test_the_sse_parts_limit_grows_with_the_ramps_steps():
    args = argparse.Namespace(ramp=True, ramp_steps=8)
    assert part_limit_s("sse", args) == LIMITS_S["sse"] + 8 * RAMP_STEP_LIMIT_S
    assert part_limit_s("api", args) == LIMITS_S["api"]
    assert part_limit_s("sse", argparse.Namespace(ramp=False, ramp_steps=8)) == 240


def test_a_ramp_capped_below_its_doubling_bisects_from_the_cap():
    ns, (ceiling, why) = _ramp(lambda n: GAP_FAIL if n > 2500 else "", start=2000,
                               most=3200)  # fmt: skip
    assert ns == [2000, 3200, 2600, 2300, 2400]
    assert (ceiling, why) == (2400, f"N=2600: {GAP_FAIL}")
