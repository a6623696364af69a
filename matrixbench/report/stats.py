"""Is a latency difference real? A bootstrap interval of the ratio of means on raw samples.

Deterministic (fixed seed), so a report rendered twice from the same records is identical.
"""
from dataclasses import dataclass
from typing import Optional

import numpy as np

from matrixbench.report import arithmetic

CONFIDENCE = 0.95
RESAMPLES = 2000
_CHUNK = 250


@dataclass(frozen=True)
class Change:
    """candidate vs baseline: mean ratio as a % change, its interval and whether it excludes 0."""

    change_pct: float
    low_pct: Optional[float] = None
    high_pct: Optional[float] = None

    @property
    def significant(self):
        """True/False when the interval is known; None when there were no raw samples."""
        if self.low_pct is None:
            return None
        return self.low_pct > 0 or self.high_pct < 0


def change(baseline_mean, candidate_mean, baseline_samples=None, candidate_samples=None):
    """The % change of candidate over baseline, with a bootstrap interval when samples exist."""
    percent = arithmetic.change_pct(baseline_mean, candidate_mean)
    if not _usable(baseline_samples) or not _usable(candidate_samples):
        return Change(percent)
    low, high = ratio_of_means_interval(baseline_samples, candidate_samples)
    return Change(percent, arithmetic.percent(low), arithmetic.percent(high))


def _usable(samples):
    return samples is not None and len(samples) >= 2


def ratio_of_means_interval(baseline, candidate, confidence=CONFIDENCE, resamples=RESAMPLES, seed=0):
    """Percentile bootstrap interval of mean(candidate) / mean(baseline)."""
    rng = np.random.default_rng(seed)
    base, cand = np.asarray(baseline, dtype=float), np.asarray(candidate, dtype=float)
    ratios = np.concatenate([
        _resampled_means(rng, cand, size) / _resampled_means(rng, base, size)
        for size in _chunks(resamples)
    ])
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(ratios, [tail, 1.0 - tail])
    return float(low), float(high)


def _chunks(total):
    """Resample in chunks so memory stays bounded for long sample series."""
    sizes = [_CHUNK] * (total // _CHUNK)
    return sizes + ([total % _CHUNK] if total % _CHUNK else [])


def _resampled_means(rng, values, count):
    picks = rng.integers(0, len(values), size=(count, len(values)))
    return values[picks].mean(axis=1)


def geometric_mean(values):
    """Geometric mean of positive numbers; None for an empty list."""
    values = [value for value in values if value and value > 0]
    if not values:
        return None
    return float(np.exp(np.mean(np.log(values))))
