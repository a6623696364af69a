"""Significance across processes: a change is judged from process means, never from pooled samples.

(The hierarchical bootstrap these tests once covered is gone: issue 21. Its level is checked by
tests/test_report_verdicts_sim.py against a simulator with known truth; the interval's arithmetic
by tests/test_report_judge.py against scipy's Welch test.)
"""
import numpy as np
import pytest

from matrixbench.report import stats


def _process(mean, spread, seed, count=200):
    return np.random.default_rng(seed).normal(mean, mean * spread, count).tolist()


def _processes(means, spread=0.01, seed=0):
    return [_process(mean, spread, seed + index) for index, mean in enumerate(means)]


def _means(processes):
    return [float(np.mean(samples)) for samples in processes]


def test_cleanly_separated_process_means_are_starred():
    judged = stats.judge(_means(_processes([10.0, 10.1, 9.9])), _means(_processes([12.0, 12.1, 11.9], seed=10)),
                         margin_pct=2.0)
    assert judged.verdict == "slower" and judged.starred
    assert (judged.baseline_processes, judged.candidate_processes) == (3, 3)
    assert 1 < judged.low < judged.ratio < judged.high


def test_overlapping_process_means_are_not_starred_however_tight_the_samples():
    before, after = _processes([10.0, 12.0, 14.0]), _processes([11.0, 13.0, 15.0], seed=10)
    judged = stats.judge(_means(before), _means(after), margin_pct=2.0)
    assert judged.verdict == "undecided" and judged.low < 1 < judged.high
    # the samples taken as if each were a process would have called it a clear change
    pooled = stats.judge(sum(before, []), sum(after, []), margin_pct=2.0)
    assert pooled.verdict == "slower"


def test_one_process_is_not_tested():
    judged = stats.judge(_means([_process(10.0, 0.01, 1)]), _means(_processes([8.0, 8.0])), margin_pct=2.0)
    assert (judged.ratio - 1) * 100 == pytest.approx(-20.0, abs=0.5)
    assert judged.verdict == "not tested" and judged.low is None and judged.baseline_processes == 1


def test_judging_is_deterministic_and_brackets_the_ratio():
    before, after = _means(_processes([10.0, 10.5])), _means(_processes([12.0, 12.5], seed=5))
    first = stats.judge(before, after, margin_pct=2.0)
    assert first == stats.judge(before, after, margin_pct=2.0)
    assert first.low < first.ratio < first.high


def test_geometric_mean():
    assert stats.geometric_mean([1.0, 4.0]) == pytest.approx(2.0)
    assert stats.geometric_mean([]) is None
