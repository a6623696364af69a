"""Issue 34: verdicts that hold their level, scored against simulators of known truth.

The truth is planted (a lognormal process level, or tests/hostsim.py's host fitted to the H100 records);
the rates are shares of simulated comparisons, never the statistics' own output. Trial counts keep each
test to a few CPU seconds; the big sweeps are benchmarks/bench_host_verdicts.py (results committed).
"""
import math

import numpy as np
import pytest
from scipy import stats as scipy_stats

import hostsim
from matrixbench.executors import adaptive
from matrixbench.report import stats, verdict_summary

STARS = ("faster", "slower")


# --- 1. repeats auto: the stopping rule -------------------------------------------------------------

def _waves(baseline, candidate, policy, rule):
    """One balanced comparison under ``rule``: "old" stops at the first decided verdict (6caf100's)."""
    count = policy.minimum
    while True:
        judged = stats.judge(baseline[:count], candidate[:count], margin_pct=policy.margin_pct)
        if count >= policy.maximum:
            return judged
        spread = adaptive.Spread(math.sqrt((np.var(np.log(baseline[:count]), ddof=1)
                                            + np.var(np.log(candidate[:count]), ddof=1)) / 2))
        if rule == "old":
            go = not judged.decided and adaptive.promising(judged, policy, spread)
        else:
            go = adaptive.goes_on(judged, policy, count, rule)
            if go and rule == adaptive.SPENDING:
                go = adaptive.promising(judged, policy, spread)
        if not go:
            return judged
        count += 1


def _star_rate(rule, trials=1200, seed=1):
    rng = np.random.default_rng(seed)
    policy = adaptive.Policy(3, 10, 3.0)
    stars = 0
    for _ in range(trials):
        cv = rng.uniform(0.01, 0.10)
        sides = [10.0 * np.exp(rng.normal(0.0, cv, 10)) for _ in range(2)]
        stars += _waves(*sides, policy, rule).verdict in STARS
    return stars / trials


def test_the_default_stopping_rule_holds_the_level_where_stopping_at_the_first_verdict_did_not():
    assert adaptive.Policy(3, 10, 3.0).stopping == adaptive.SPENDING
    old, spending = _star_rate("old"), _star_rate(adaptive.SPENDING)
    # 1,200 trials: the binomial standard error of a 5% share is 0.63%
    assert spending <= 0.05, f"spending: {spending:.1%} false stars"
    assert old > 0.065, f"the old rule starred {old:.1%}: the simulation lost its power to see peeking"


def test_the_final_only_rule_holds_the_level_too():
    assert _star_rate(adaptive.FINAL, trials=1000, seed=2) <= 0.05


# --- 2. Welch with a small side; detectable_pct -------------------------------------------------------

@pytest.mark.parametrize("sizes", [(2, 5), (2, 10), (3, 10), (4, 10), (3, 4)])
@pytest.mark.parametrize("spreads", [(1.0, 1.0), (1.0, 0.3)])
def test_small_unequal_sides_hold_the_level(sizes, spreads):
    rng = np.random.default_rng(sum(sizes) * 10 + int(spreads[1] * 10))
    trials = 20000          # standard error 0.15% at 5%
    sides = [np.exp(0.05 * spread * rng.standard_normal((trials, count))) for count, spread in zip(sizes, spreads)]
    judged = stats.judge_many(*sides, margin_pct=3.0)
    rate = float(np.mean(np.isin(judged.verdict, STARS)))
    assert rate <= 0.05, f"{sizes} at spreads {spreads}: {rate:.1%} false stars"


def test_detectable_pct_is_the_change_starred_80_percent_of_the_time():
    """5 processes a side at a log-SD of 4%: plant the median detectable change and count the stars."""
    rng = np.random.default_rng(7)
    trials, sd = 8000, 0.04
    null = stats.judge_many(np.exp(sd * rng.standard_normal((trials, 5))),
                            np.exp(sd * rng.standard_normal((trials, 5))), margin_pct=3.0)
    change = float(np.median(null.detectable_pct)) / 100.0
    moved = stats.judge_many(np.exp(sd * rng.standard_normal((trials, 5))),
                             (1.0 + change) * np.exp(sd * rng.standard_normal((trials, 5))), margin_pct=3.0)
    power = float(np.mean(moved.verdict == "slower"))
    assert 0.72 <= power <= 0.88, f"planted at detectable_pct {change:.2%}: starred {power:.1%}"


# --- 3. multiplicity ---------------------------------------------------------------------------------

def test_benjamini_hochberg_step_up():
    # m = 5, q = 0.05: thresholds 0.01 0.02 0.03 0.04 0.05; the 3rd smallest (0.03) is the largest under
    assert stats.benjamini_hochberg([0.03, 0.001, 0.5, None, 0.02, 0.045]) == [True, True, False, False, True, False]
    assert stats.benjamini_hochberg([None, 0.2]) == [False, False]


def test_the_summary_says_what_chance_alone_stars_and_the_fdr_view_keeps_few_of_them():
    """100 unchanged rows and 10 clear changes: the per-row view stars ~5 chance rows, BH keeps ~the 10."""
    rng = np.random.default_rng(3)
    truth = np.r_[np.ones(100), np.full(10, 1.2)]
    judged = stats.judge_many(np.exp(0.03 * rng.standard_normal((110, 5))),
                              truth[:, None] * np.exp(0.03 * rng.standard_normal((110, 5))), margin_pct=3.0)
    rows = [{"kind": "image_change", "verdict": str(v), "p_value": float(p)} for v, p in zip(judged.verdict,
                                                                                          judged.p_value)]
    line = verdict_summary.multiplicity_line(rows)
    assert "chance alone would star about 5.5 of them (at least one in 100% of such reports)" in line
    kept = stats.benjamini_hochberg([row["p_value"] for row in rows])
    assert sum(kept[10:]) == 0 or sum(kept[:100]) <= 2
    assert sum(kept[100:]) == 10


def test_the_fdr_view_holds_its_rate_over_many_reports():
    """BH's false-discovery rate, E[false discoveries / max(discoveries, 1)] per report, <= q m0 / m."""
    rng = np.random.default_rng(4)
    shares = []
    for _ in range(300):
        truth = np.r_[np.ones(90), np.full(10, 1.06)]
        judged = stats.judge_many(np.exp(0.03 * rng.standard_normal((100, 5))),
                                  truth[:, None] * np.exp(0.03 * rng.standard_normal((100, 5))), margin_pct=3.0)
        kept = np.asarray(stats.benjamini_hochberg(list(map(float, judged.p_value))))
        shares.append(int(kept[:90].sum()) / max(int(kept.sum()), 1))
    assert float(np.mean(shares)) <= 0.05


def test_the_aa_line_carries_the_simulated_rate_of_its_design():
    rows = [{"kind": "aa_change", "verdict": "no change", "baseline_processes": 3, "candidate_processes": 3}] * 4
    line = verdict_summary.aa_line(rows)
    rate = stats.simulated_false_star_rate(3, 3)
    assert f"stars {rate:.1%} of them at 3 vs 3 processes; nominal 5%" in line
    assert 0.01 <= rate <= 0.06
    for pairing in (stats.PAIRED_BY_ROUND, stats.IN_TURNS):   # in turns: t on the rounds' log ratios, as by round
        paired = [dict(row, pairing=pairing) for row in rows]
        rate = stats.simulated_false_star_rate(3, 3, paired=True)
        assert f"stars {rate:.1%} of them at 3 vs 3 processes {pairing}; nominal 5%" in verdict_summary.aa_line(paired)


# --- 4. the host: fit, robust estimates, paired speed-ups ---------------------------------------------

needs_evidence = pytest.mark.skipif(not hostsim.EVIDENCE.exists(), reason=f"no H100 evidence at {hostsim.EVIDENCE}")


@pytest.fixture(scope="module")
def host():
    if not hostsim.EVIDENCE.exists():
        pytest.skip(f"no H100 evidence at {hostsim.EVIDENCE}")
    fitted, _ = hostsim.fit()
    return fitted


@needs_evidence
def test_the_host_simulator_fits_the_h100_records(host):
    """Every host measure read from the records' samples_ms, and the same measure of the fitted
    simulator in the records' shape (cells, call counts, 20 copies)."""
    for name, (evidence, simulated) in hostsim.check_fit(host).items():
        tolerance = 0.06 if name == "slow_share" else 0.15 * evidence
        assert abs(simulated - evidence) <= tolerance, f"{name}: evidence {evidence:.3f}, simulator {simulated:.3f}"
    assert 1.3 <= host.slow_factor <= 2.0 and host.stall_rate_per_s > 0.2


def test_a_trimmed_process_estimate_is_not_dragged_by_stalls():
    """Stalls alone (the H100's rate and size, no state wander): the trimmed mean of a process moves
    far less than its mean; at the fitted host the two are alike (the wander is between processes)."""
    rng = np.random.default_rng(5)
    stalls = hostsim.Host(0.9, 45.0, 1.0, 0.0, 1.0, 0.01)
    draws = [stalls.process(rng, 4.0, 300) for _ in range(300)]
    sd = {how: float(np.std(np.log([stats.process_estimate(d, how) for d in draws]))) for how in ("mean", "trimmed")}
    assert sd["trimmed"] < sd["mean"] / 2, sd


@needs_evidence
def test_paired_speedups_decide_a_true_10_percent_with_3_processes(host):
    """Eager/compiled blocks in one process (stats.judge_paired) against today's unpaired speed-up
    (compiled process means against eager ones): 3 processes, 300 calls of each, a 4 ms eager cell."""
    rng = np.random.default_rng(6)
    trials, paired, today = 150, 0, 0
    for _ in range(trials):
        blocks = [host.paired_blocks(rng, 4.0, 4.0 / 1.1, 300, 25) for _ in range(3)]
        paired += stats.judge_paired(blocks, margin_pct=3.0).verdict == "faster"
        eager = [host.process(rng, 4.0, 300).mean() for _ in range(3)]
        compiled = [host.process(rng, 4.0 / 1.1, 300).mean() for _ in range(3)]
        today += stats.judge(eager, compiled, margin_pct=3.0).verdict == "faster"
    assert paired / trials >= 0.80, f"paired decided {paired / trials:.0%}"
    assert today / trials <= 0.25, f"today's unpaired decided {today / trials:.0%}"


@needs_evidence
def test_paired_speedups_hold_the_level_at_no_change(host):
    rng = np.random.default_rng(8)
    trials = 400
    stars = sum(stats.judge_paired([host.paired_blocks(rng, 4.0, 4.0, 300, 25) for _ in range(3)],
                                   margin_pct=3.0).verdict in STARS for _ in range(trials))
    assert stars / trials <= 0.05 + 2 * math.sqrt(0.05 * 0.95 / trials)


def test_judge_paired_reads_one_draw_per_process():
    processes = [[(4.0, 2.0), (4.4, 2.0), (40.0, 2.0)], [(3.0, 1.5)], []]
    judged = stats.judge_paired(processes, margin_pct=3.0)
    assert (judged.baseline_processes, judged.candidate_processes) == (2, 2)     # the empty one is left out
    # draws: exp(median(log 2, log 2.2, log 20)) = 2.2 and 2.0: their geometric mean
    assert judged.ratio == pytest.approx(math.sqrt(2.2 * 2.0))
    expected = scipy_stats.ttest_1samp(np.log([2.2, 2.0]), 0.0).confidence_interval(0.95)
    assert (judged.low, judged.high) == pytest.approx((math.exp(expected.low), math.exp(expected.high)))
    assert stats.judge_paired([[(4.0, 2.0)]], margin_pct=3.0).verdict == "not tested"


# --- 6. drift and shared machine states: pairing by round -------------------------------------------

def _rounds(rng, trials, rounds, drift_sd, noise=0.02, change=0.0):
    """(baseline, candidate) estimates by round with a machine state each round shares (log-SD drift_sd)."""
    state = rng.normal(0.0, drift_sd, (trials, rounds))
    base = 10.0 * np.exp(state + rng.normal(0.0, noise, (trials, rounds)))
    cand = 10.0 * (1 + change) * np.exp(state + rng.normal(0.0, noise, (trials, rounds)))
    return base, cand


def test_pairing_by_round_cancels_a_shared_machine_state():
    """A 5% state shared by each round's two sides, 1% process noise, 5 rounds: paired by round, no
    change is starred at most 5% and called "no change" far more often than unpaired (Welch)."""
    rng = np.random.default_rng(11)
    trials = 1000            # standard error of a 5% share: 0.7%
    base, cand = _rounds(rng, trials, 5, 0.05, noise=0.01)
    paired = [stats.judge_by_round(b, c, margin_pct=3.0).verdict for b, c in zip(base, cand)]
    unpaired = stats.judge_many(base, cand, margin_pct=3.0).verdict
    assert np.mean(np.isin(paired, STARS)) <= 0.05
    assert np.mean(np.asarray(paired) == "no change") > np.mean(unpaired == "no change") + 0.3
    assert stats.judge_by_round([10.0, None], [11.0, 12.0], margin_pct=3.0).verdict == "not tested"


def test_the_report_can_say_when_a_runs_cells_moved_together():
    rng = np.random.default_rng(12)
    moved = alarms = 0
    for _ in range(300):
        cells = np.exp(rng.normal(0.0, 0.3, (20, 1)))              # 20 cells of different latencies
        step = np.exp(np.array([0.0, 0.0, 0.05]))                     # round 2 runs 5% slower for every cell
        noisy = lambda: np.exp(rng.normal(0.0, 0.03, (20, 3)))       # noqa: E731
        found = stats.round_effects((cells * step * noisy()).tolist())
        still = stats.round_effects((cells * noisy()).tolist())
        moved += found.moved
        alarms += still.moved
    assert moved / 300 >= 0.9 and alarms / 300 <= 0.03
    assert "moved together by round" in found.describe() and "round 2: +" in found.describe()
