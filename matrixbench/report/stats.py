"""Is a latency difference real? A hierarchical bootstrap over processes, then samples.

Samples inside one process are not independent draws of what a rerun would give (its memory
layout, clocks, the machine's load that minute and the chosen kernels are fixed for all of
them), so a change between two cells is tested only when each has at least two processes
(repeats): resample the processes, then the samples within each, and take the interval of the
ratio of means. With one process the change is shown, marked "not tested".

Deterministic (fixed seed), so a report rendered twice from the same records is identical.
"""
from dataclasses import dataclass
from typing import Optional

import numpy as np

from matrixbench.report import arithmetic

CONFIDENCE = 0.95
RESAMPLES = 2000
_CHUNK = 250


MIN_PROCESSES = 2
NOT_TESTED = "not tested: one process per cell"


@dataclass(frozen=True)
class Change:
    """candidate vs baseline: mean ratio as a % change, its interval and whether it excludes 0."""

    change_pct: float
    low_pct: Optional[float] = None
    high_pct: Optional[float] = None
    processes: Optional[int] = None    # the fewer processes of the two cells, when known

    @property
    def significant(self):
        """True/False when the interval is known; None when untested (one process, no samples)."""
        if self.low_pct is None:
            return None
        return self.low_pct > 0 or self.high_pct < 0


def compare_processes(baseline_processes, candidate_processes):
    """The change of candidate over baseline, each a list of processes' sample lists; the
    hierarchical interval only when both have MIN_PROCESSES or more."""
    baseline_mean = mean_of_processes(baseline_processes)
    candidate_mean = mean_of_processes(candidate_processes)
    percent = arithmetic.change_pct(baseline_mean, candidate_mean)
    processes = min(len(baseline_processes), len(candidate_processes))
    if processes < MIN_PROCESSES:
        return Change(percent, processes=processes)
    low, high = hierarchical_interval(baseline_processes, candidate_processes)
    return Change(percent, arithmetic.percent(low), arithmetic.percent(high), processes)


def mean_of_processes(processes):
    """The mean over every sample of every process (a list of sample lists): a cell's latency."""
    return float(np.mean(np.concatenate(processes)))


def hierarchical_interval(baseline, candidate, confidence=CONFIDENCE, resamples=RESAMPLES, seed=0):
    """Percentile interval of mean(candidate) / mean(baseline) resampling processes, then samples."""
    rng = np.random.default_rng(seed)
    ratios = np.concatenate([_hierarchical_means(rng, candidate, size) / _hierarchical_means(rng, baseline, size)
                             for size in _chunks(resamples)])
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(ratios, [tail, 1.0 - tail])
    return float(low), float(high)


def _hierarchical_means(rng, processes, count):
    """``count`` bootstrap means: pick len(processes) processes with replacement, resample each
    picked process's samples, average the processes' resampled means."""
    arrays = [np.asarray(values, dtype=float) for values in processes]
    slots = len(arrays)
    within = np.stack([_resampled_means(rng, values, count * slots).reshape(count, slots) for values in arrays])
    picks = rng.integers(0, slots, size=(count, slots))
    return within[picks, np.arange(count)[:, None], np.arange(slots)[None, :]].mean(axis=1)


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
