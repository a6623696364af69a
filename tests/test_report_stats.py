"""Significance across processes: a hierarchical bootstrap when each cell has >= 2 processes."""
import numpy as np
import pytest

from matrixbench.report import stats


def _process(mean, spread, seed, count=200):
    return np.random.default_rng(seed).normal(mean, mean * spread, count).tolist()


def _processes(means, spread=0.01, seed=0):
    return [_process(mean, spread, seed + index) for index, mean in enumerate(means)]


def test_cleanly_separated_process_means_are_significant():
    change = stats.compare_processes(_processes([10.0, 10.1, 9.9]), _processes([12.0, 12.1, 11.9], seed=10))
    assert change.significant is True and change.processes == 3
    assert 0 < change.low_pct < change.change_pct < change.high_pct


def test_overlapping_process_means_are_not_significant_however_tight_the_samples():
    before, after = _processes([10.0, 12.0, 14.0]), _processes([11.0, 13.0, 15.0], seed=10)
    change = stats.compare_processes(before, after)
    assert change.significant is False
    assert change.low_pct < 0 < change.high_pct
    # the samples alone (one pooled process each) would have called it a clear change
    pooled = stats.hierarchical_interval([sum(before, [])], [sum(after, [])])
    assert pooled[0] > 1.0


def test_one_process_is_not_tested():
    change = stats.compare_processes([_process(10.0, 0.01, 1)], _processes([8.0, 8.0]))
    assert change.change_pct == pytest.approx(-20.0, abs=0.5)
    assert change.significant is None and change.processes == 1 and change.low_pct is None


def test_interval_is_deterministic_and_brackets_the_ratio():
    before, after = _processes([10.0, 10.5]), _processes([12.0, 12.5], seed=5)
    first = stats.hierarchical_interval(before, after)
    assert first == stats.hierarchical_interval(before, after)
    assert first[0] < np.mean(np.concatenate(after)) / np.mean(np.concatenate(before)) < first[1]


def test_resampling_in_chunks_covers_every_resample():
    assert sum(stats._chunks(2000)) == 2000 and sum(stats._chunks(1001)) == 1001


def test_geometric_mean():
    assert stats.geometric_mean([1.0, 4.0]) == pytest.approx(2.0)
    assert stats.geometric_mean([]) is None
