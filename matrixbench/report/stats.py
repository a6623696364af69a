"""Is a latency difference real? An interval from processes: Welch's t on log process means.

A process is the unit of replication. Samples inside one process are not independent draws of
what a rerun would give (its memory layout, clocks, the machine's load that minute and the chosen
kernels are fixed for all of them), so every comparison (image against image, mode against mode,
compiled against eager) is judged from each side's **per-process means** only: the difference of
the mean log process means, Welch's t interval with Welch-Satterthwaite degrees of freedom,
exponentiated into a ratio candidate / baseline (a ratio of geometric means) with its interval.
At 2-5 processes a side this holds its level; the percentile bootstrap it replaces did not (at
repeats 2 it starred one no-change comparison in three). Samples within a process serve the
within-process CV flag only (``timing.noisy``, the runner's).

How others decide: pyperf (``pyperf/_compare.py`` -> ``_utils.is_significant``) runs a two-sample
Student's t-test over the values of its worker processes, 95% critical values from a t table, and
prints "not significant" otherwise; PyTorch's ``benchmarks/dynamo/common.py`` (speedup_experiment)
interleaves eager and compiled calls in one process, reports median eager / median compiled and a
``scipy.stats.ttest_ind`` p-value over those calls. We keep the t-test, but over processes (their
calls within one process share that process's offset), on logs (ratios are what we report), with
Welch's unequal variances, and as an interval so "no change" can be a verdict too.

Verdicts (``judge``): "faster" / "slower" when the interval of candidate / baseline excludes 1;
"no change" when it lies inside [1/(1+m), 1+m] for the equivalence margin m; "undecided"
otherwise; "not tested" with fewer than MIN_PROCESSES processes on a side. Deterministic (no
resampling), so a report rendered twice from the same records is identical.
"""
import math
from dataclasses import dataclass
from typing import Optional, Sequence, Tuple

import numpy as np
from scipy import stats as scipy_stats

from matrixbench.report import arithmetic

CONFIDENCE = 0.95
RESAMPLES = 2000
_CHUNK = 250


MIN_PROCESSES = 2
NOT_TESTED = "not tested: one process per cell"

VERDICTS = ("faster", "slower", "no change", "undecided", "not tested")
FASTER, SLOWER, NO_CHANGE, UNDECIDED, UNTESTED = VERDICTS
DECIDED = (FASTER, SLOWER, NO_CHANGE)


@dataclass(frozen=True)
class Judgement:
    """candidate vs baseline from their process means: the ratio, its interval and the verdict."""

    ratio: float                      # candidate / baseline (geometric mean of process means); <1 is faster
    low: Optional[float]              # the ratio's interval; None when not tested
    high: Optional[float]
    verdict: str                      # one of VERDICTS
    baseline_processes: int
    candidate_processes: int
    detectable_pct: Optional[float]   # the smallest change (in %) this comparison could have detected

    @property
    def decided(self) -> bool:
        return self.verdict in DECIDED

    @property
    def starred(self) -> bool:
        """faster or slower: the interval excludes no change."""
        return self.verdict in (FASTER, SLOWER)


def judge(baseline_means, candidate_means, *, margin_pct, confidence=CONFIDENCE) -> Judgement:
    """Judge candidate against baseline, each a list of per-process means (ms, > 0).

    The ratio is exp(mean log candidate - mean log baseline); with MIN_PROCESSES or more a side,
    its interval is Welch's (``contrast``) and ``detectable_pct`` the interval's half-width as a
    change: an observed change at least that large would have been starred.
    """
    baseline, candidate = _positive(baseline_means), _positive(candidate_means)
    ratio = math.exp(float(np.mean(np.log(candidate)) - np.mean(np.log(baseline))))
    counts = (len(baseline), len(candidate))
    if min(counts) < MIN_PROCESSES:
        return Judgement(ratio, None, None, UNTESTED, *counts, None)
    estimate, low, high, _ = contrast([baseline, candidate], [-1.0, 1.0], confidence)
    bounds = (math.exp(low), math.exp(high))
    return Judgement(ratio, *bounds, verdict(*bounds, margin_pct), *counts,
                     arithmetic.percent(math.exp(high - estimate)))


def verdict(low, high, margin_pct) -> str:
    """The verdict of a ratio interval [low, high] (candidate / baseline) at margin m (in %)."""
    if high < 1.0:
        return FASTER
    if low > 1.0:
        return SLOWER
    limit = 1.0 + margin_pct / 100.0
    return NO_CHANGE if 1.0 / limit <= low and high <= limit else UNDECIDED


def contrast(groups: Sequence[Sequence[float]], weights: Sequence[float],
             confidence=CONFIDENCE) -> Tuple[float, float, float, float]:
    """A linear contrast sum(w_i x mean(log g_i)) of groups of process means (each > 0), with its
    Welch-Satterthwaite interval: (estimate, low, high, df), all on the log scale (exp() them for a
    ratio). Groups with a non-zero weight need MIN_PROCESSES or more means. With zero spread in
    every group the interval is the estimate itself (df infinite)."""
    if len(groups) != len(weights):
        raise ValueError(f"{len(groups)} groups but {len(weights)} weights")
    used = [(float(weight), np.log(_positive(group))) for group, weight in zip(groups, weights) if weight]
    short = [len(logs) for _, logs in used if len(logs) < MIN_PROCESSES]
    if short:
        raise ValueError(f"a group has {short[0]} process means; a contrast needs {MIN_PROCESSES} or more")
    estimate = sum(weight * float(np.mean(logs)) for weight, logs in used)
    terms = [weight ** 2 * float(np.var(logs, ddof=1)) / len(logs) for weight, logs in used]
    variance = sum(terms)
    if variance <= 0.0:
        return estimate, estimate, estimate, math.inf
    df = variance ** 2 / sum(term ** 2 / (len(logs) - 1) for term, (_, logs) in zip(terms, used))
    half = float(scipy_stats.t.ppf(0.5 + confidence / 2.0, df)) * math.sqrt(variance)
    return estimate, estimate - half, estimate + half, df


def _positive(values):
    array = np.asarray([float(value) for value in values], dtype=float)
    if array.size == 0 or not np.all(np.isfinite(array)) or np.any(array <= 0.0):
        raise ValueError(f"process means must be positive finite numbers, got {list(values)!r}")
    return array



# The percentile hierarchical bootstrap below is what the report used before judge(); its callers
# (tables, comparisons, calibration) move to judge() next, then it goes.
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
