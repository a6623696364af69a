"""stats.judge / stats.contrast: Welch's t on log process means, and the verdict rules.

The interval is checked against scipy's own Welch test (an independent implementation); how
often it holds its level is tests/test_report_verdicts_sim.py's job (a simulator with known truth).
"""
import math

import numpy as np
import pytest
from scipy import stats as scipy_stats

from matrixbench.report import stats

BASELINE = [10.0, 10.4, 9.8, 10.1]
CANDIDATE = [9.0, 9.3, 8.8, 9.1]


def test_interval_is_welchs_on_the_logs_as_scipy_computes_it():
    """scipy's Welch test gives the estimate, its standard error and Welch-Satterthwaite's df; the judgement takes
    one df fewer, at least n_small - 1 (stats.WELCH_DF_LESS: Welch's own is too generous at few processes a side,
    tests/test_verdicts_welch_df.py)."""
    judged = stats.judge(BASELINE, CANDIDATE, margin_pct=2.0)
    welch = scipy_stats.ttest_ind(np.log(CANDIDATE), np.log(BASELINE), equal_var=False)
    low, high = welch.confidence_interval(0.95)
    estimate, error = (low + high) / 2, (high - low) / 2 / scipy_stats.t.ppf(0.975, welch.df)
    df = max(welch.df - stats.WELCH_DF_LESS, 3)
    assert stats.WELCH_DF_LESS == 1.0 and df == pytest.approx(welch.df - 1)
    half = scipy_stats.t.ppf(0.975, df) * error
    assert (judged.low, judged.high) == pytest.approx((math.exp(estimate - half), math.exp(estimate + half)), rel=1e-9)
    geometric = scipy_stats.gmean(CANDIDATE) / scipy_stats.gmean(BASELINE)
    assert judged.ratio == pytest.approx(geometric, rel=1e-12)
    assert judged.verdict == "faster" and judged.decided and judged.starred
    assert (judged.baseline_processes, judged.candidate_processes) == (4, 4)
    # detectable_pct: the change starred with 80% power, (t_0.975 + t_0.80) standard errors (issue 34)
    power = (math.exp((scipy_stats.t.ppf(0.975, df) + scipy_stats.t.ppf(0.80, df)) * error) - 1) * 100
    assert judged.detectable_pct == pytest.approx(power, rel=1e-9)
    assert judged.p_value == pytest.approx(2 * scipy_stats.t.sf(abs(estimate) / error, df), rel=1e-9)


def test_small_unequal_sides_take_hsus_degrees_of_freedom():
    """4 against 3 processes: df = 3 - 1 (Hsu), not Welch-Satterthwaite's (anti-conservative there)."""
    candidate = CANDIDATE[:3]
    judged = stats.judge(BASELINE, candidate, margin_pct=2.0)
    logs_b, logs_c = np.log(BASELINE), np.log(candidate)
    error = math.sqrt(logs_b.var(ddof=1) / 4 + logs_c.var(ddof=1) / 3)
    estimate = logs_c.mean() - logs_b.mean()
    half = scipy_stats.t.ppf(0.975, 2) * error
    assert (judged.low, judged.high) == pytest.approx((math.exp(estimate - half), math.exp(estimate + half)), rel=1e-9)


def test_slower_is_the_mirror_of_faster():
    faster, slower = stats.judge(BASELINE, CANDIDATE, margin_pct=2.0), stats.judge(CANDIDATE, BASELINE, margin_pct=2.0)
    assert slower.verdict == "slower"
    assert slower.ratio == pytest.approx(1 / faster.ratio)
    assert (slower.low, slower.high) == pytest.approx((1 / faster.high, 1 / faster.low))


@pytest.mark.parametrize(("low", "high", "margin", "expected"), [
    (0.90, 0.99, 2.0, "faster"), (1.001, 1.01, 2.0, "slower"),
    (0.985, 1.015, 2.0, "no change"), (1 / 1.02, 1.02, 2.0, "no change"),
    (0.97, 1.01, 2.0, "undecided"), (0.99, 1.03, 2.0, "undecided"), (0.985, 1.015, 1.0, "undecided"),
])
def test_verdict_rules(low, high, margin, expected):
    assert stats.verdict(low, high, margin) == expected


def test_tight_equal_sides_are_no_change_and_spread_ones_undecided():
    tight = stats.judge([10.0, 10.01, 9.99], [10.005, 9.995, 10.0], margin_pct=1.0)
    assert tight.verdict == "no change" and tight.low < 1 < tight.high and tight.decided and not tight.starred
    spread = stats.judge([10.0, 11.0], [10.5, 9.6], margin_pct=1.0)
    assert spread.verdict == "undecided" and not spread.decided
    assert spread.detectable_pct > tight.detectable_pct


def test_fewer_than_two_processes_a_side_is_not_tested():
    judged = stats.judge([10.0], [8.0, 8.0], margin_pct=2.0)
    assert judged.verdict == "not tested" and judged.low is None and judged.high is None
    assert judged.detectable_pct is None and judged.ratio == pytest.approx(0.8)
    assert (judged.baseline_processes, judged.candidate_processes) == (1, 2) and not judged.decided


def test_contrast_of_a_two_by_two_splits_main_effects_and_interaction():
    # planted: log latency = a (torch) + b (transformers) + ab (interaction), same spread everywhere
    rng = np.random.default_rng(7)
    noise = rng.normal(0.0, 0.01, size=5)
    effects = {"torch": math.log(0.9), "transformers": math.log(1.05), "both": math.log(0.98)}
    centers = [0.0, effects["torch"], effects["transformers"],
               effects["torch"] + effects["transformers"] + effects["both"]]
    groups = [np.exp(2.0 + center + noise - noise.mean()) for center in centers]
    estimate, low, high, df = stats.contrast(groups, [1.0, -1.0, -1.0, 1.0])
    assert estimate == pytest.approx(effects["both"], abs=1e-12)
    assert low < estimate < high and df == pytest.approx(4 * 4, rel=1e-9)   # equal spreads: df = sum(n - 1)
    torch_only = stats.contrast(groups, [-1.0, 1.0, 0.0, 0.0])
    assert torch_only[0] == pytest.approx(effects["torch"], abs=1e-12)


def test_contrast_of_zero_spread_is_a_point():
    estimate, low, high, df = stats.contrast([[2.0, 2.0], [4.0, 4.0]], [-1.0, 1.0])
    assert low == estimate == high == pytest.approx(math.log(2.0)) and math.isinf(df)


@pytest.mark.parametrize(("groups", "weights", "message"), [
    ([[1.0], [2.0, 2.0]], [-1.0, 1.0], "needs 2 or more"),
    ([[1.0, 0.0], [2.0, 2.0]], [-1.0, 1.0], "positive"),
    ([[1.0, 1.0]], [1.0, 1.0], "weights"),
])
def test_contrast_refuses_what_it_cannot_judge(groups, weights, message):
    with pytest.raises(ValueError, match=message):
        stats.contrast(groups, weights)


def test_a_zero_weight_group_may_have_one_process():
    assert stats.contrast([[1.0], [2.0, 2.2], [3.0, 3.1]], [0.0, -1.0, 1.0])[0] == pytest.approx(
        math.log(math.sqrt(3.0 * 3.1) / math.sqrt(2.0 * 2.2)))
