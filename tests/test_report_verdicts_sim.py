"""The report's verdicts scored against a simulator with known truth.

The simulator below plants the truth (each side's center latency) and draws what a run would
record: per process, a lognormal offset of 1-10% CV (clocks, placement, memory layout) times the
mean of SAMPLES iterations with 1-3% per-iteration noise and rare outliers (1.5-3x). The truth
is the ratio of the planted centers; nothing of the report computes it. The estimator under
test is stats.judge_many, the code stats.judge runs (one comparison = one row).

Trial counts: TRIALS per case and repeats level puts the binomial standard error of a 5% share
near 0.35%, so "<= 6%" and ">= 93%" are ~3 standard errors from the nominal 5% / 95%.
"""
import numpy as np
import pytest

from matrixbench.report import stats

REPEATS = (2, 3, 5, 10)
TRIALS = 4000
SAMPLES = 40
OUTLIER_RATE = 0.003
MARGIN_PCT = 2.0


def simulate(rng, centers, repeats, between_cv, iteration_cv):
    """Process means, shape (trials, repeats): center x lognormal offset x mean of noisy samples."""
    trials = len(centers)
    offsets = np.exp(rng.standard_normal((trials, repeats)) * between_cv[:, None])
    samples = 1.0 + rng.standard_normal((trials, repeats, SAMPLES)) * iteration_cv[:, None, None]
    outliers = rng.random(samples.shape) < OUTLIER_RATE
    samples = np.where(outliers, samples * rng.uniform(1.5, 3.0, samples.shape), samples)
    return centers[:, None] * offsets * samples.mean(axis=2)


def pair(seed, repeats, truth, *, same_spread=True):
    """(baseline, candidate) process means of TRIALS comparisons whose true ratio is ``truth``
    (candidate center / baseline center, one per trial); between-process CV 1-10% (per side
    unless same_spread), per-iteration CV 1-3% (shared: the same cell's timing regime)."""
    rng = np.random.default_rng(seed)
    between = rng.uniform(0.01, 0.10, TRIALS)
    other = between if same_spread else rng.uniform(0.01, 0.10, TRIALS)
    iteration = rng.uniform(0.01, 0.03, TRIALS)
    base = rng.uniform(2.0, 50.0, TRIALS)   # ms
    return (simulate(rng, base, repeats, between, iteration),
            simulate(rng, base * truth, repeats, other, iteration))


def covered(low, high, truth):
    return float(np.mean((low <= truth) & (truth <= high)))


@pytest.mark.parametrize("repeats", REPEATS)
def test_no_change_is_starred_at_most_six_percent(repeats):
    baseline, candidate = pair(100 + repeats, repeats, np.ones(TRIALS))
    judged = stats.judge_many(baseline, candidate, margin_pct=MARGIN_PCT)
    starred = float(np.mean(np.isin(judged.verdict, ("faster", "slower"))))
    assert starred <= 0.06, f"repeats {repeats}: {starred:.1%} of no-change comparisons starred"
    assert covered(judged.low, judged.high, 1.0) >= 0.93


# image changes: torch versions; mode changes: a compiled mode against default (its spread differs)
CHANGES = {"image": (200, [0.90, 0.97, 1.03, 1.10]), "mode": (300, [0.80, 0.95, 1.0, 1.05])}


@pytest.mark.parametrize("repeats", REPEATS)
@pytest.mark.parametrize("kind", CHANGES)
def test_change_intervals_hold_the_truth(kind, repeats):
    seed, truths = CHANGES[kind]
    truth = np.random.default_rng(repeats).choice(truths, TRIALS)
    baseline, candidate = pair(seed + repeats, repeats, truth, same_spread=False)
    judged = stats.judge_many(baseline, candidate, margin_pct=MARGIN_PCT)
    assert covered(judged.low, judged.high, truth) >= 0.93
    wrong_way = np.mean(((truth < 1) & (judged.verdict == "slower")) | ((truth > 1) & (judged.verdict == "faster")))
    assert wrong_way <= 0.01


@pytest.mark.parametrize("repeats", REPEATS)
def test_speedup_intervals_hold_the_truth(repeats):
    # speed-up = eager / compiled: judge compiled against eager and invert the ratio and its bounds
    speedup = np.random.default_rng(repeats).choice([1.0, 1.3, 2.0], TRIALS)
    eager, compiled = pair(400 + repeats, repeats, 1.0 / speedup, same_spread=False)
    judged = stats.judge_many(eager, compiled, margin_pct=MARGIN_PCT)
    assert covered(1.0 / judged.high, 1.0 / judged.low, speedup) >= 0.93
    assert np.all(1.0 / judged.high <= 1.0 / judged.ratio) and np.all(1.0 / judged.ratio <= 1.0 / judged.low)


def test_clear_changes_are_starred_and_tight_equal_cells_are_no_change():
    """The verdicts are not bought by never deciding: with low spread they decide."""
    rng = np.random.default_rng(5)
    between, iteration = np.full(TRIALS, 0.01), rng.uniform(0.01, 0.03, TRIALS)
    base = rng.uniform(2.0, 50.0, TRIALS)
    changed = stats.judge_many(simulate(rng, base, 5, between, iteration),
                               simulate(rng, base * 0.9, 5, between, iteration), margin_pct=MARGIN_PCT)
    assert np.mean(changed.verdict == "faster") >= 0.95
    same = stats.judge_many(simulate(rng, base, 10, between, iteration),
                            simulate(rng, base, 10, between, iteration), margin_pct=MARGIN_PCT)
    assert np.mean(same.verdict == "no change") >= 0.50    # rare outliers widen some intervals
    assert np.all(same.detectable_pct < changed.detectable_pct.max())


def run_order(repeats, counterbalanced, fraction):
    """Start times in [0, 1) of image A's and B's processes of one cell over a run of ``repeats``
    rounds, each round one block per image (the cell at ``fraction`` of its block). Counterbalanced:
    A's block first in even rounds, B's in odd ones (the scheduler's order); else A always first."""
    block = 1.0 / (2 * repeats)
    first = [counterbalanced and round_ % 2 == 1 for round_ in range(repeats)]
    a = np.array([(2 * k + (1 if b_first else 0) + fraction) * block for k, b_first in enumerate(first)])
    b = np.array([(2 * k + (0 if b_first else 1) + fraction) * block for k, b_first in enumerate(first)])
    return a, b


@pytest.mark.parametrize("repeats", REPEATS)
@pytest.mark.parametrize("fraction", (0.0, 0.5, 0.99))
def test_linear_drift_with_counterbalanced_order_shifts_the_estimate_under_a_third_percent(repeats, fraction):
    a_times, b_times = run_order(repeats, True, fraction)
    drift = 0.05                 # the machine slows by 5% from the run's start to its end
    judged = stats.judge((1 + drift * a_times) * 10.0, (1 + drift * b_times) * 10.0, margin_pct=MARGIN_PCT)
    assert abs(judged.ratio - 1.0) < 0.003


def test_the_same_drift_without_counterbalancing_biases_every_change():
    a_times, b_times = run_order(3, False, 0.5)
    judged = stats.judge((1 + 0.05 * a_times) * 10.0, (1 + 0.05 * b_times) * 10.0, margin_pct=MARGIN_PCT)
    assert judged.ratio - 1.0 > 0.007          # about drift / (2 x repeats)
