"""Issue 34: repeats auto's waves and the report judge alike, and the two together hold the level; mode changes
paired by round.

tests/autosim.py runs the real waves (executors.adaptive.Waves) over processes of known truth, each model's in
the executors' order under a machine that may drift, step or share a state each round, then judges every
comparison as the report does (verdicts.judge_cells). The big sweep is benchmarks/bench_auto_pairing.py
(results/auto_pairing.md and auto_pairing_modes.md); these hold its findings at a few hundred trials, each bound
three binomial standard errors from its target (a method at exactly 5% false stars passes but for 0.13% of seeds;
15 such checks, about 2% that one fails by chance).
"""
import math

import numpy as np
import pytest

import autosim
import hostsim
from matrixbench.executors import adaptive
from matrixbench.report import stats

pytestmark = pytest.mark.slow   # auto's waves then the report, thousands of comparisons a test

AUTO = adaptive.Policy(3, 10, 3.0)
STATE = autosim.Machine(state_sd=0.05)
EVERYTHING = autosim.Machine(0.05, 0.05, 0.05)


def _most(trials, rate=0.05):
    """A share of ``trials`` at a true ``rate`` stays below this but for 0.13% of the time (three standard errors)."""
    return rate + 3 * math.sqrt(rate * (1 - rate) / trials)


def _least_coverage(trials):
    """95% intervals over ``trials`` comparisons hold the truth at least this often but for 0.13% of the time."""
    return 1.0 - _most(trials)


def _decided_both_ways(judge):
    """One auto run of 80 models under a shared round state: (decided by the waves' last look, by the report)."""
    rng = np.random.default_rng(7)
    judged, _, outcome = autosim.run_auto(rng, 80, AUTO, autosim.lognormal(0.01), machine=STATE, judge=judge)
    return outcome.decided, sum(found.judgement.decided for found in judged)


def test_the_waves_stop_on_the_verdicts_the_report_gives():
    """The waves judge with the report's function (stats.judge_sides): after the last wave, the comparisons they
    count decided are the report's decided ones. Judging unpaired instead (as before) under a round state of 5%
    at 1% process noise, the waves saw almost nothing decided where the report decides most: the check can fail."""
    assert adaptive.default_judge() is stats.judge_sides
    waves, report = _decided_both_ways(None)
    assert waves == report
    waves, report = _decided_both_ways(autosim.unpaired_judge)
    assert report - waves >= 10, (waves, report)


@pytest.mark.parametrize("cv", [0.01, 0.05])
@pytest.mark.parametrize("machine", [autosim.Machine(), STATE, EVERYTHING], ids=["none", "state", "all"])
def test_auto_then_the_report_holds_the_level(cv, machine):
    """Image changes at no change, auto 3-10 then the report (paired by round): starred at most 5% + 3 SE (7.1%)
    and 95% intervals holding the truth at least 92.9% of the time, 1,000 comparisons."""
    judged, _ = autosim.many(1000, 25, AUTO, autosim.lognormal(cv), seed=60, machine=machine)
    found = autosim.rates(judged, ["image_change"])
    assert found["stars"] <= _most(1000) and found["coverage"] >= _least_coverage(1000), found


@pytest.mark.skipif(not hostsim.EVIDENCE.exists(), reason=f"no H100 evidence at {hostsim.EVIDENCE}")
def test_auto_then_the_report_holds_the_level_under_the_fitted_host():
    host, _ = hostsim.fit()
    judged, _ = autosim.many(250, 25, AUTO, autosim.host(host), seed=61, machine=EVERYTHING)
    found = autosim.rates(judged, ["image_change"])
    assert found["stars"] <= _most(250) and found["coverage"] >= _least_coverage(250), found


# --- mode changes paired by round ---------------------------------------------------------------------------

@pytest.mark.parametrize("policy, machine", [
    (adaptive.Policy(3, 3, 3.0), autosim.Machine()), (adaptive.Policy(3, 3, 3.0), STATE),
    (adaptive.Policy(3, 3, 3.0), autosim.Machine(drift=0.05)), (adaptive.Policy(3, 3, 3.0), EVERYTHING),
    (AUTO, STATE), (AUTO, EVERYTHING)], ids=["fixed 3-none", "fixed 3-state", "fixed 3-drift", "fixed 3-all",
                                             "auto-state", "auto-all"])
def test_mode_changes_paired_by_round_hold_the_level(policy, machine):
    """Reduce-overhead as fast as default, 5% process noise, 200 models (400 mode changes): the report pairs them
    by round (every one, at fixed repeats and under auto: on the rounds both sides ran, stats.rounds_paired), stars
    at most 5% + 3 SE (8.3%) and its intervals hold the truth at least 91.7% of the time."""
    judged, _ = autosim.many(200, 25, policy, autosim.lognormal(0.05), seed=62, machine=machine, modes=autosim.MATRIX)
    found = autosim.rates(judged, ["mode_change"])
    assert found["paired"] == 1.0
    assert found["stars"] <= _most(found["comparisons"]), found
    assert found["coverage"] >= _least_coverage(found["comparisons"]), found


def test_under_a_shared_round_state_mode_changes_paired_by_round_decide_where_unpaired_ones_cannot():
    """1% process noise, a state each round shares (log-SD 5%), fixed 5: paired by round says "no change" for most
    null mode changes, Welch on the same processes for almost none."""
    judged, _ = autosim.many(200, 25, adaptive.Policy(5, 5, 3.0), autosim.lognormal(0.01), seed=63, machine=STATE,
                             modes=autosim.MATRIX)
    paired, unpaired = autosim.rates(judged, ["mode_change"]), autosim.rates(judged, ["mode_change"], unpaired=True)
    assert paired["no_change"] > unpaired["no_change"] + 0.30, (paired, unpaired)


# --- futility on the comparison's own paired spread -----------------------------------------------------------

def test_under_a_shared_round_state_futility_lets_paired_comparisons_get_the_rounds_that_decide_them():
    """Image changes at no change, 1% process noise, a state each round shares (log-SD 5%), auto 3-10, 400
    comparisons: futility projecting the pooled spread of process means (which the state inflates to about 5%)
    called every one futile at 3 rounds (3.00 processes a cell, "no change" about a third); projecting the round
    log-ratios' spread (about 1.4%, the state cancels) lets them run on: measured 4.16 processes a cell and 96.5%
    "no change" at 800 (benchmarks/bench_auto_pairing.py --sections 3). The level holds (the test above)."""
    def run():
        judged, per_cell = autosim.many(400, 25, AUTO, autosim.lognormal(0.01), seed=64, machine=STATE)
        return per_cell, autosim.rates(judged, ["image_change"])

    with autosim.futility_on_process_spread():
        before_cell, before = run()
    now_cell, now = run()
    assert before_cell < 3.05 and before["no_change"] < 0.5, (before_cell, before)
    assert now_cell > 3.5 and now["no_change"] > 0.85, (now_cell, now)
    assert now["stars"] <= _most(400) and now["coverage"] >= _least_coverage(400), now
