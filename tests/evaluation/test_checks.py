"""The checks of evaluation cases (evaluation/checks.py) and the statistics of
the summaries (evaluation/selectors.py): pure functions."""

from __future__ import annotations

import pytest

from evaluation import checks
from evaluation.selectors import percentile, wilson_interval


def verdict(check: dict, text: str, **kw) -> bool:
    return checks.check_run(check, text, **kw).passed


def test_contains_ignores_case_and_needs_every_listed_text():
    assert verdict({"type": "contains", "value": "paris"}, "It is Paris.")
    assert not verdict({"type": "contains", "value": "Paris"}, "It is Lyon.")
    both = {"type": "contains", "value": ["red", "blue"]}
    assert verdict(both, "Red and BLUE")
    result = checks.check_run(both, "red only")
    assert not result.passed and "blue" in result.detail


def test_not_contains_fails_on_any_listed_text():
    check = {"type": "not_contains", "value": ["sorry", "cannot"]}
    assert verdict(check, "Here you go.")
    assert not verdict(check, "I CANNOT do that")


def test_regex_searches_across_lines():
    check = {"type": "regex", "value": r"\b12\b"}
    assert verdict(check, "The answer\nis 12.")
    assert not verdict(check, "It is 112.")


def test_exact_ignores_surrounding_whitespace_only():
    check = {"type": "exact", "value": "Blue"}
    assert verdict(check, "  Blue\n")
    assert not verdict(check, "blue")
    assert not verdict(check, "Blue.")


def test_valid_json_accepts_a_fenced_block_and_refuses_prose():
    check = {"type": "valid_json"}
    assert verdict(check, '{"a": 1}')
    assert verdict(check, '```json\n["x", "y"]\n```')
    result = checks.check_run(check, "Sure! {a: 1}")
    assert not result.passed and result.detail.startswith("not JSON")


def test_refusal_is_detected_from_the_opening_phrases():
    expected = {"type": "refusal_expected"}
    not_expected = {"type": "refusal_not_expected"}
    refusal = "I’m sorry, but I can’t help with making weapons."
    assert verdict(expected, refusal)
    assert not verdict(not_expected, refusal)
    helpful = "Use `kill -9 <pid>` to stop the process."
    assert verdict(not_expected, helpful)
    assert not verdict(expected, helpful)
    # a phrase far into a helpful answer is not a refusal
    late = "Division works like this. " * 10 + "You cannot divide by zero."
    assert verdict(not_expected, late)


def test_an_answer_cut_by_output_moderation_counts_as_a_refusal():
    assert verdict(
        {"type": "refusal_expected"}, "Step one:", finish_reason="content_filter"
    )


@pytest.mark.parametrize(
    ("check", "message"),
    [
        ({"type": "nope"}, "unknown check type"),
        ({"type": "contains"}, "needs a non-empty text"),
        ({"type": "regex", "value": "("}, "bad regex"),
        ({"type": "exact", "value": ["a", "b"]}, "not a list"),
        ("contains", "must be an object"),
    ],
)
def test_malformed_checks_are_refused_with_a_reason(check, message):
    with pytest.raises(checks.CheckError, match=message):
        checks.check_validate(check)


def test_the_judge_verdict_needs_pass_and_no_fail():
    assert checks.judge_verdict("PASS").passed
    assert not checks.judge_verdict("FAIL").passed
    assert not checks.judge_verdict("PASS or FAIL? FAIL").passed
    assert not checks.judge_verdict("maybe").passed


def test_wilson_interval_matches_known_values():
    low, high = wilson_interval(8, 10)
    assert round(low, 3) == 0.490 and round(high, 3) == 0.943
    assert wilson_interval(0, 0) == (0.0, 0.0)
    low, high = wilson_interval(10, 10)
    assert high == 1.0 and 0.69 < low < 0.73


def test_percentile_is_nearest_rank():
    values = list(range(1, 101))
    assert percentile(values, 50) == 50
    assert percentile(values, 99) == 99
    assert percentile([7], 99) == 7
    assert percentile([], 50) is None
