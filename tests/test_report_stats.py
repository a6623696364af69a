"""Significance of latency differences from raw samples."""
import numpy as np
import pytest

from matrixbench.report import stats


def _samples(mean, spread, seed, count=200):
    return np.random.default_rng(seed).normal(mean, mean * spread, count).tolist()


def test_a_real_shift_is_significant():
    before, after = _samples(10.0, 0.02, 1), _samples(9.0, 0.02, 2)
    change = stats.change(np.mean(before), np.mean(after), before, after)
    assert change.significant is True
    assert change.low_pct < change.change_pct < change.high_pct < 0


def test_the_same_distribution_is_not_significant():
    before, after = _samples(10.0, 0.05, 3), _samples(10.0, 0.05, 4)
    change = stats.change(np.mean(before), np.mean(after), before, after)
    assert change.significant is False
    assert change.low_pct < 0 < change.high_pct


def test_noise_hides_a_small_shift():
    before, after = _samples(10.0, 0.3, 5, count=20), _samples(9.8, 0.3, 6, count=20)
    assert stats.change(np.mean(before), np.mean(after), before, after).significant is False


def test_without_samples_significance_is_unknown():
    change = stats.change(10.0, 8.0, None, [])
    assert change.change_pct == pytest.approx(-20.0)
    assert change.significant is None and change.low_pct is None


def test_interval_is_deterministic_and_brackets_the_ratio():
    before, after = _samples(10.0, 0.1, 7), _samples(12.0, 0.1, 8)
    first = stats.ratio_of_means_interval(before, after)
    assert first == stats.ratio_of_means_interval(before, after)
    assert first[0] < np.mean(after) / np.mean(before) < first[1]


def test_resampling_in_chunks_covers_every_resample():
    assert sum(stats._chunks(2000)) == 2000 and sum(stats._chunks(1001)) == 1001


def test_geometric_mean():
    assert stats.geometric_mean([1.0, 4.0]) == pytest.approx(2.0)
    assert stats.geometric_mean([]) is None
