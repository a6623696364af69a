"""Is a latency difference real? An interval from processes: Welch's t on log process means.

A process is the unit of replication. Samples inside one process are not independent draws of
what a rerun would give (its memory layout, clocks, the machine's load that minute and the chosen
kernels are fixed for all of them), so every comparison (image against image, mode against mode,
compiled against eager) is judged from one number per process only (``judged_estimate``: JUDGED_ESTIMATE
of its calls, the mean, so that a verdict's % is the ratio of the ms shown, but where a change paired by round
left out rounds only one side ran (``judge_sides``); the trimmed mean, which a few
host stalls cannot drag, is one switch away: docs/verdicts.md): the difference of the mean log
process estimates, Welch's t interval with Welch-Satterthwaite degrees of freedom (Hsu's n_small - 1
for small unequal sides), exponentiated into a ratio candidate / baseline (a ratio of geometric
means, not of mean latencies) with its interval.
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
from dataclasses import dataclass, replace
from typing import Optional, Sequence, Tuple

import numpy as np
from scipy import stats as scipy_stats

from matrixbench.report import arithmetic

CONFIDENCE = 0.95
MIN_PROCESSES = 2
POWER = 0.80             # detectable_pct: the change starred this often
HSU_BELOW = 5            # unequal sides, the smaller with fewer processes than this: Hsu's df (n_small - 1)
WELCH_DF_LESS = 1.0      # two sides: Welch-Satterthwaite's df less this, at least n_small - 1 (contrast_many)

VERDICTS = ("faster", "slower", "no change", "undecided", "not tested")
FASTER, SLOWER, NO_CHANGE, UNDECIDED, UNTESTED = VERDICTS
DECIDED = (FASTER, SLOWER, NO_CHANGE)
STARRED = (FASTER, SLOWER)
PAIRINGS = ("unpaired", "paired by round", "paired blocks", "in turns")
UNPAIRED, PAIRED_BY_ROUND, PAIRED_BLOCKS, IN_TURNS = PAIRINGS


@dataclass(frozen=True)
class Judgement:
    """candidate vs baseline from their process means: the ratio, its interval and the verdict."""

    ratio: float                      # candidate / baseline (geometric mean of process means); <1 is faster
    low: Optional[float]              # the ratio's interval; None when not tested
    high: Optional[float]
    verdict: str                      # one of VERDICTS
    baseline_processes: int
    candidate_processes: int
    detectable_pct: Optional[float]   # the change (in %) this comparison would star 80% of the time (POWER)
    margin_pct: Optional[float] = None  # the equivalence margin the verdict was made at
    p_value: Optional[float] = None   # two-sided, of no change (for benjamini_hochberg); None when not tested
    pairing: str = "unpaired"         # UNPAIRED, PAIRED_BY_ROUND (judge_by_round), PAIRED_BLOCKS (judge_paired)
    #                                   or IN_TURNS (judge_sides on rounds_in_turns)
    rounds_left_out: int = 0          # paired by round: the rounds only one side ran; in turns: the rounds without
    #                                   turns both sides share (judge_sides); not judged
    rounds_in_turns: Optional[int] = None   # in turns: the rounds judged (each a pair of processes in turns)

    @property
    def paired_rounds(self) -> Optional[int]:
        """The rounds a comparison paired by round (both sides ran them) or in turns (``rounds_in_turns``) was
        judged on; None for other pairings."""
        if self.pairing == IN_TURNS:
            return self.rounds_in_turns
        if self.pairing != PAIRED_BY_ROUND:
            return None
        return (self.baseline_processes + self.candidate_processes - self.rounds_left_out) // 2

    @property
    def decided(self) -> bool:
        return self.verdict in DECIDED

    @property
    def starred(self) -> bool:
        """faster or slower: the interval excludes no change."""
        return self.verdict in STARRED


def judge(baseline_means, candidate_means, *, margin_pct, confidence=CONFIDENCE) -> Judgement:
    """Judge candidate against baseline, each a list of per-process means (ms, > 0).

    The ratio is exp(mean log candidate - mean log baseline): a ratio of **geometric** means of
    process means, not of mean latencies (the two differ by about -(s_c^2 - s_b^2) / 2 for log
    spreads s; -4.2% at CVs of 2% vs 30%). With MIN_PROCESSES or more a side its interval is Welch's
    (``contrast``; Hsu's conservative df for small unequal sides) and ``detectable_pct`` the true
    change this comparison would star with probability POWER (80%) at its measured spread.
    """
    baseline, candidate = _positive(baseline_means), _positive(candidate_means)
    counts = (len(baseline), len(candidate))
    if min(counts) < MIN_PROCESSES:
        ratio = math.exp(float(np.mean(np.log(candidate)) - np.mean(np.log(baseline))))
        return Judgement(ratio, None, None, UNTESTED, *counts, None, margin_pct)
    found = judge_many(baseline[None, :], candidate[None, :], margin_pct=margin_pct, confidence=confidence)
    return Judgement(float(found.ratio[0]), float(found.low[0]), float(found.high[0]), str(found.verdict[0]),
                     *counts, float(found.detectable_pct[0]), margin_pct, float(found.p_value[0]))


@dataclass(frozen=True)
class Judgements:
    """judge_many's answer: one entry per comparison, as arrays (see Judgement)."""

    ratio: np.ndarray
    low: np.ndarray
    high: np.ndarray
    verdict: np.ndarray
    detectable_pct: np.ndarray
    p_value: np.ndarray


def judge_many(baseline, candidate, *, margin_pct, confidence=CONFIDENCE) -> Judgements:
    """judge() of many comparisons at once (what judge runs, one row): ``baseline`` and
    ``candidate`` are arrays (comparisons, processes) of process means, MIN_PROCESSES or more."""
    estimate, low, high, df = contrast_many([np.log(baseline), np.log(candidate)], [-1.0, 1.0], confidence)
    bounds = (np.exp(low), np.exp(high))
    critical = scipy_stats.t.ppf(0.5 + confidence / 2.0, df)
    with np.errstate(divide="ignore", invalid="ignore"):
        error = (high - estimate) / critical                  # the standard error of the log ratio
        p_value = np.where(error > 0.0, 2.0 * scipy_stats.t.sf(np.abs(estimate) / error, df),
                           np.where(estimate == 0.0, 1.0, 0.0))
    detectable = _detectable(critical, df, error)
    return Judgements(np.exp(estimate), *bounds, verdicts(*bounds, margin_pct), detectable, p_value)


def _detectable(critical, df, error):
    """The change (%) a comparison stars with probability POWER: its interval's critical value plus the
    POWER quantile of t at ``df``, times the log ratio's standard ``error``, exponentiated."""
    return arithmetic.percent(np.exp((critical + scipy_stats.t.ppf(POWER, df)) * error))


def equal_sides_df(processes: int) -> float:
    """The degrees of freedom of a two-sided (Welch) comparison of ``processes`` processes a side with equal
    spreads, as contrast_many takes them: Welch-Satterthwaite's 2n - 2 less WELCH_DF_LESS, at least n - 1. What a
    forecast of such a comparison's interval uses (detectable_at, repeats: auto's projections)."""
    return max(2.0 * processes - 2.0 - WELCH_DF_LESS, processes - 1.0)


def detectable_at(cv: float, processes: int, confidence: float = CONFIDENCE) -> float:
    """The change (%) a comparison of ``processes`` processes a side would star with probability POWER
    (80%) when each process's estimate spreads by ``cv`` (the SD of log process estimates, as a CV) on both
    sides: what ``judge`` reports as ``detectable_pct`` for that spread (equal sides: Welch's df is 2n - 2, less
    WELCH_DF_LESS).
    Before a run (matrixbench.host_noise) this turns a measured spread into the change a run can resolve."""
    if processes < MIN_PROCESSES:
        raise ValueError(f"{processes} process(es) a side; a comparison needs {MIN_PROCESSES} or more")
    df = equal_sides_df(processes)
    critical = scipy_stats.t.ppf(0.5 + confidence / 2.0, df)
    return float(_detectable(critical, df, float(cv) * math.sqrt(2.0 / processes)))


def verdict(low, high, margin_pct) -> str:
    """The verdict of a ratio interval [low, high] (candidate / baseline) at margin m (in %)."""
    return str(verdicts(np.asarray([low]), np.asarray([high]), margin_pct)[0])


def verdicts(low, high, margin_pct):
    """verdict() of arrays of interval bounds: faster when the interval lies below 1, slower above,
    no change inside [1/(1+m), 1+m], else undecided."""
    limit = 1.0 + margin_pct / 100.0
    return np.select([high < 1.0, low > 1.0, (low >= 1.0 / limit) & (high <= limit)],
                     [FASTER, SLOWER, NO_CHANGE], UNDECIDED)


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
    found = contrast_many([logs[None, :] for _, logs in used], [weight for weight, _ in used], confidence)
    estimate, low, high, df = (float(value[0]) for value in found)
    return estimate, low, high, df


def contrast_many(log_groups, weights, confidence=CONFIDENCE):
    """contrast() of many at once on logs: each group an array (contrasts, processes) of log process
    means; returns arrays (estimate, low, high, df). Two groups: Welch-Satterthwaite's df less WELCH_DF_LESS, at
    least n_small - 1 (Welch's alone stars up to 5.8% at 3 v 3 when the spreads differ). Groups of unequal sizes, the
    smallest under HSU_BELOW processes: df at most n_small - 1 (Hsu), as Welch's alone stars too often there."""
    used = [(float(weight), np.asarray(logs, dtype=float)) for logs, weight in zip(log_groups, weights) if weight]
    estimate = sum(weight * logs.mean(axis=1) for weight, logs in used)
    terms = [weight ** 2 * logs.var(axis=1, ddof=1) / logs.shape[1] for weight, logs in used]
    variance = sum(terms)
    with np.errstate(divide="ignore", invalid="ignore"):   # zero spread everywhere: df infinite
        df = variance ** 2 / sum(term ** 2 / (logs.shape[1] - 1) for term, (_, logs) in zip(terms, used))
    df = np.where(variance > 0.0, df, np.inf)
    sizes = [logs.shape[1] for _, logs in used]
    if len(used) == 2:
        # Welch's df estimated from two sample variances is too generous at few processes a side when the
        # spreads differ (equal sides: 5.8% false stars at 3 v 3, 6.4% at 2 v 2, 5.5% at 5 v 10; docs/verdicts.md,
        # benchmarks/results/independent_verdicts.md): one df fewer, never below the smaller side's n - 1
        df = np.maximum(df - WELCH_DF_LESS, min(sizes) - 1)
    if len(set(sizes)) > 1 and min(sizes) < HSU_BELOW:
        # Welch's df is anti-conservative when a small side meets a larger one (at 2 vs 10 processes
        # 10% false stars, 3 vs 10 6.6%): Hsu's df, n_small - 1, holds the level (<= 4.8% there)
        df = np.minimum(df, min(sizes) - 1)
    half = scipy_stats.t.ppf(0.5 + confidence / 2.0, df) * np.sqrt(variance)
    return estimate, estimate - half, estimate + half, df


def _positive(values):
    array = np.asarray([float(value) for value in values], dtype=float)
    if array.size == 0 or not np.all(np.isfinite(array)) or np.any(array <= 0.0):
        raise ValueError(f"process means must be positive finite numbers, got {list(values)!r}")
    return array



def cell_estimate(process_means) -> float:
    """A cell's one central latency (ms): the geometric mean of its processes' mean ms (with one
    process, that process's mean, exactly). Every table, chart, comparisons.csv column and cost shows
    this, so ms and the judged ratio (judge: a ratio of these geometric means) always agree."""
    means = _positive(process_means)
    if means.size == 1:
        return float(means[0])
    return float(np.exp(np.mean(np.log(means))))


def geometric_mean(values):
    """Geometric mean of positive numbers; None for an empty list."""
    values = [value for value in values if value and value > 0]
    if not values:
        return None
    return float(np.exp(np.mean(np.log(values))))


def benjamini_hochberg(p_values, q=1.0 - CONFIDENCE):
    """Which of ``p_values`` (None: not tested, never a discovery) are discoveries at false-discovery
    rate ``q`` (Benjamini-Hochberg step-up): the k smallest, k the largest with p_(k) <= k q / m,
    m the number tested. A list of bools in the input's order."""
    tested = [(value, index) for index, value in enumerate(p_values) if value is not None and math.isfinite(value)]
    count = len(tested)
    found = [False] * len(p_values)
    ranked = sorted(tested)
    cut = max((rank for rank, (value, _) in enumerate(ranked, 1) if value <= rank * q / count), default=0)
    for _, index in ranked[:cut]:
        found[index] = True
    return found


def chance_stars(tested, alpha=1.0 - CONFIDENCE):
    """If nothing had changed: the expected number of starred comparisons among ``tested`` ones and the
    chance of at least one (each at level alpha, as if independent)."""
    return alpha * tested, 1.0 - (1.0 - alpha) ** tested if tested else 0.0


# --- per-process estimates that a few host stalls cannot drag (issue 34) --------------------------------

PROCESS_ESTIMATES = ("mean", "median", "trimmed", "block_median")
TRIM = 0.10              # trimmed: the mean of the middle 80% of a process's calls
BLOCK = 25               # block_median: the median of the means of consecutive blocks of this many calls
JUDGED_ESTIMATE = "mean"   # what verdicts judge per process: the mean, so that ms and % agree (docs/verdicts.md: why)
MIN_SAMPLES = 20         # fewer samples than this: a process is judged on its mean


def process_estimate(samples_ms: Sequence[float], how: str = "trimmed") -> float:
    """One process's latency (ms) from its calls: ``mean`` (the seed's, the published comparison's),
    ``median``, ``trimmed`` (the mean of the middle 1 - 2 TRIM) or ``block_median`` (the median of
    BLOCK-call block means). benchmarks/bench_host_verdicts.py chose among them under the host
    simulator fitted to the H100 records (docs/verdicts.md says why)."""
    values = np.sort(_positive(samples_ms))
    if how == "mean":
        return float(values.mean())
    if how == "median":
        return float(np.median(values))
    if how == "trimmed":
        cut = int(TRIM * values.size)
        return float(values[cut:values.size - cut].mean())
    if how == "block_median":
        original = _positive(samples_ms)
        blocks = max(1, original.size // BLOCK)
        return float(np.median([part.mean() for part in np.array_split(original, blocks)]))
    raise ValueError(f"unknown process estimate {how!r}: one of {', '.join(PROCESS_ESTIMATES)}")


def judged_estimate(samples_ms, mean_ms: float, how: Optional[str] = None) -> float:
    """What a verdict judges of one process: ``how`` (default JUDGED_ESTIMATE) of its samples, its
    ``mean_ms`` with fewer than MIN_SAMPLES samples or samples that are not positive numbers. The
    report (verdicts.judged_estimates) and the waves of repeats auto (adaptive.recorded) both ask here."""
    how = how or JUDGED_ESTIMATE
    if how == "mean" or not samples_ms or len(samples_ms) < MIN_SAMPLES:
        return float(mean_ms)
    try:
        return process_estimate(samples_ms, how)
    except ValueError:
        return float(mean_ms)


# --- paired speed-ups: eager and compiled blocks measured in one process --------------------------------

PAIRED_DRAWS = ("sum_ratio", "median_log_ratio")


def paired_draw(blocks: Sequence[Tuple[float, float]], how: str = "median_log_ratio") -> float:
    """One process's speed-up eager / compiled from its (eager_ms, compiled_ms) block pairs, measured
    alternately in that process so the host's state at the time is in both halves of a pair:
    ``median_log_ratio`` (exp of the median of the pairs' log ratios: a stall in one block moves one
    pair) or ``sum_ratio`` (all eager ms / all compiled ms)."""
    eager = _positive([pair[0] for pair in blocks])
    compiled = _positive([pair[1] for pair in blocks])
    if how == "sum_ratio":
        return float(eager.sum() / compiled.sum())
    if how == "median_log_ratio":
        return float(np.exp(np.median(np.log(eager) - np.log(compiled))))
    raise ValueError(f"unknown paired draw {how!r}: one of {', '.join(PAIRED_DRAWS)}")


def judge_paired(processes: Sequence[Sequence[Tuple[float, float]]], *, margin_pct: float,
                 confidence: float = CONFIDENCE, how: str = "median_log_ratio") -> Judgement:
    """The speed-up eager / compiled from paired blocks, pooled across processes with each process one
    draw (``paired_draw``): the geometric mean of the draws with Student's t interval on their logs
    (n - 1 df). As verdicts.judge_speedup reads: ratio, low and high are speed-ups, "faster" means the
    compiled side is faster. ``processes``: one list of (eager_ms, compiled_ms) per process (the
    runner's record field, e.g. ``paired_blocks``); processes without pairs are left out. Fewer than
    MIN_PROCESSES: "not tested"."""
    draws = [paired_draw(blocks, how) for blocks in processes if blocks]
    count = len(draws)
    if count < MIN_PROCESSES:
        ratio = float(np.exp(np.mean(np.log(draws)))) if draws else float("nan")
        return Judgement(ratio, None, None, UNTESTED, count, count, None, margin_pct, pairing=PAIRED_BLOCKS)
    # compiled / eager = 1 / draw: the verdict rules read a candidate (compiled) against a baseline (eager)
    logs = -np.log(np.asarray(draws))[None, :]
    estimate, low, high, df = contrast_many([logs], [1.0], confidence)
    verdict = str(verdicts(np.exp(low), np.exp(high), margin_pct)[0])
    critical = float(scipy_stats.t.ppf(0.5 + confidence / 2.0, df[0]))
    error = float(high[0] - estimate[0]) / critical
    p_value = float(2.0 * scipy_stats.t.sf(abs(float(estimate[0])) / error, df[0])) if error > 0 else \
        (1.0 if estimate[0] == 0 else 0.0)
    detectable = float(_detectable(critical, df[0], error))
    return Judgement(float(np.exp(-estimate[0])), float(np.exp(-high[0])), float(np.exp(-low[0])), verdict,
                     count, count, float(detectable), margin_pct, p_value, PAIRED_BLOCKS)


def judge_paired_change(baseline, candidate, *, margin_pct: float, confidence: float = CONFIDENCE,
                        how: str = "median_log_ratio") -> Judgement:
    """A speed-up's change between two images (candidate / baseline speed-up) from each side's paired
    blocks (as judge_paired takes them): ``judge`` on the per-process paired draws."""
    return judge([paired_draw(b, how) for b in baseline if b], [paired_draw(b, how) for b in candidate if b],
                 margin_pct=margin_pct, confidence=confidence)


def simulated_false_star_rate(baseline_processes: int, candidate_processes: int, trials: int = 4000,
                              seed: int = 34, paired: bool = False) -> float:
    """The share of no-change comparisons ``judge`` stars at these process counts, measured on a
    simulator of known truth (lognormal process levels, a 1-10% CV drawn per side; seeded, so a report
    prints the same figure twice): what an A/A line is held against, beside the nominal level. ``paired``:
    judged paired by round (judge_by_round_many, the rounds both sides have) as the report judges them."""
    rng = np.random.default_rng(seed)
    sides = [np.exp(rng.standard_normal((trials, count)) * rng.uniform(0.01, 0.10, (trials, 1)))
             for count in (baseline_processes, candidate_processes)]
    if paired:
        rounds = min(baseline_processes, candidate_processes)
        found = judge_by_round_many(np.log(sides[1][:, :rounds]) - np.log(sides[0][:, :rounds]), margin_pct=3.0)
        return float(np.mean(np.isin(found.verdict, STARRED)))
    found = judge_many(*sides, margin_pct=3.0)
    return float(np.mean(np.isin(found.verdict, STARRED)))


# --- drift and machine states: pairing by round (issue 34) ----------------------------------------------

def judge_by_round(baseline_by_round, candidate_by_round, *, margin_pct: float,
                   confidence: float = CONFIDENCE) -> Judgement:
    """candidate / baseline from processes paired by round: ``baseline_by_round[r]`` and
    ``candidate_by_round[r]`` are the two sides' process estimates (ms) of round r (run.json's
    ``order.positions``: each round's A and B ran under the same machine state), None where a side has no
    process that round. Each complete round gives one log difference, so a state the round shared
    (drift, a warm-up, a step) cancels; Student's t on them (rounds - 1 df, ``judge_log_ratios``). Fewer than
    MIN_PROCESSES complete rounds: "not tested"."""
    pairs = [(b, c) for b, c in zip(baseline_by_round, candidate_by_round) if b is not None and c is not None]
    return judge_log_ratios([math.log(float(c)) - math.log(float(b)) for b, c in pairs], margin_pct=margin_pct,
                            confidence=confidence)


def judge_log_ratios(log_ratios: Sequence[float], *, margin_pct: float, confidence: float = CONFIDENCE,
                     pairing: str = PAIRED_BY_ROUND) -> Judgement:
    """candidate / baseline from one log ratio (log candidate - log baseline) a round: the geometric mean ratio
    with Student's t interval (rounds - 1 df; judge_by_round_many), process counts the rounds. What
    judge_by_round judges (its rounds' two process estimates) and judge_sides in turns (each round's
    ``turn_log_ratio``), ``pairing`` saying which. Fewer than MIN_PROCESSES rounds: "not tested"."""
    differences = np.asarray([float(value) for value in log_ratios], dtype=float)
    count = len(differences)
    if count < MIN_PROCESSES:
        ratio = float(np.exp(differences.mean())) if count else float("nan")
        return Judgement(ratio, None, None, UNTESTED, count, count, None, margin_pct, pairing=pairing)
    found = judge_by_round_many(differences[None, :], margin_pct=margin_pct, confidence=confidence)
    return Judgement(float(found.ratio[0]), float(found.low[0]), float(found.high[0]), str(found.verdict[0]),
                     count, count, float(found.detectable_pct[0]), margin_pct, float(found.p_value[0]), pairing)


@dataclass(frozen=True)
class RoundPairs:
    """Two sides' process estimates on the rounds both ran (``rounds_paired``), in round order, and how many
    rounds only one side ran (``left_out``: their processes are not in the pairs)."""

    baseline: Tuple[float, ...]
    candidate: Tuple[float, ...]
    left_out: int = 0

    def log_ratios(self) -> Tuple[float, ...]:
        """Each shared round's log candidate - log baseline: what judge_by_round judges."""
        return tuple(math.log(float(c)) - math.log(float(b)) for b, c in zip(self.baseline, self.candidate))


def rounds_paired(baseline_rounds, baseline_estimates, candidate_rounds,
                  candidate_estimates) -> Optional[RoundPairs]:
    """The two sides' estimates on the rounds both ran, in round order (``RoundPairs``), else None (judged
    unpaired). Rounds are (run, repeat index) keys, one per estimate: each side's in one run, the same run on
    both, integer repeat indexes each once a side, and MIN_PROCESSES or more rounds both sides ran. Rounds only
    one side ran (a process that failed, or one ``repeats: auto`` added to a cell for another of its
    comparisons) are left out and counted (``left_out``).

    Leaving them out adds no bias of its own: a shared round's two processes ran under one machine state and
    are one draw of the log ratio whichever other rounds either side has; a round only one side ran has no
    partner to cancel its state against, and judging it unpaired beside the pairs would mix the two designs.
    Which rounds a side has is the waves' choice, made from verdicts at earlier looks (this comparison's, on its
    shared rounds, and its cells' other comparisons'), before the new processes' values are known: the looks
    are what the spending rule of executors.adaptive pays for, as before (tests/test_verdicts_shared_rounds.py
    measures the level)."""
    sides = [_by_round(rounds, estimates) for rounds, estimates in
             ((baseline_rounds, baseline_estimates), (candidate_rounds, candidate_estimates))]
    if sides[0] is None or sides[1] is None or _run(sides[0]) != _run(sides[1]):
        return None
    shared = sorted(set(sides[0]) & set(sides[1]), key=lambda key: key[1])
    if len(shared) < MIN_PROCESSES:
        return None
    return RoundPairs(tuple(sides[0][key] for key in shared), tuple(sides[1][key] for key in shared),
                      len(sides[0]) + len(sides[1]) - 2 * len(shared))


def _by_round(rounds, estimates) -> Optional[dict]:
    """One side's estimates by round key, or None where the side cannot be paired: keys and estimates of
    different counts, a key twice, more than one run, a repeat index that is not an integer."""
    keys = [tuple(key) for key in rounds]
    if (len(keys) != len(estimates) or len(set(keys)) != len(keys) or len({run for run, _ in keys}) != 1
            or not all(isinstance(index, int) and not isinstance(index, bool) for _, index in keys)):
        return None
    return dict(zip(keys, estimates))


def _run(side: dict):
    """The one run a side's rounds are of (``_by_round`` made sure there is one)."""
    return next(iter(side))[0]


def judge_sides(baseline_estimates, candidate_estimates, *, margin_pct: float, rounds=None, turns=None,
                confidence: float = CONFIDENCE) -> Judgement:
    """The one judgement of two cells' processes that the report (verdicts.judge_cells) and the waves of
    ``repeats: auto`` (executors.adaptive) both make: in turns (``judge_log_ratios`` on ``rounds_in_turns``) where
    ``rounds`` and ``turns`` (baseline turns, candidate turns: each process's ``Turns`` or None, as its rounds)
    give MIN_PROCESSES or more rounds in turns; else paired by round (``judge_by_round``) on the rounds both
    sides ran where ``rounds`` (baseline rounds, candidate rounds: each estimate's (run, repeat index)) is given
    and ``rounds_paired`` pairs them; else unpaired (``judge``, Welch). ``rounds`` None: the comparison's kind
    is never paired. Paired or in turns, the Judgement's process counts are each side's and ``rounds_left_out``
    the rounds not judged (``paired_rounds`` the rounds judged)."""
    sides = len(baseline_estimates), len(candidate_estimates)
    in_turns = None if rounds is None or turns is None else rounds_in_turns(rounds[0], turns[0], rounds[1], turns[1])
    if in_turns is not None:
        found = judge_log_ratios(in_turns.log_ratios, margin_pct=margin_pct, confidence=confidence, pairing=IN_TURNS)
        return replace(found, baseline_processes=sides[0], candidate_processes=sides[1],
                       rounds_left_out=in_turns.left_out, rounds_in_turns=len(in_turns.log_ratios))
    paired = None if rounds is None else rounds_paired(rounds[0], baseline_estimates, rounds[1], candidate_estimates)
    if paired is None:
        return judge(baseline_estimates, candidate_estimates, margin_pct=margin_pct, confidence=confidence)
    found = judge_by_round(paired.baseline, paired.candidate, margin_pct=margin_pct, confidence=confidence)
    return replace(found, baseline_processes=sides[0], candidate_processes=sides[1], rounds_left_out=paired.left_out)


# --- image changes in turns (issue 34, docs/turns.md) ---------------------------------------------------------

@dataclass(frozen=True)
class Turns:
    """One process's blocks timed in turns with a partner process of another image (the record's
    ``timing.turns``, read by report.cells.process_turns): its own ``image``, the pair launch's ``pair_id``, the
    ``partner``'s image, the mean ms a call of each block it measured, in block order, and the ``cores`` its blocks
    ran pinned to (None: not pinned, or a record before pinning)."""

    image: str
    pair_id: str
    partner: str
    block_ms: Tuple[float, ...]
    role: Optional[str] = None        # "first" or "second": who took the first turn
    cores: Optional[Tuple[int, ...]] = None

    def took_turns_with(self, other: "Turns") -> bool:
        """The two processes took turns together: one pair_id, each naming the other's image as its partner, and
        their blocks pinned alike (a side whose pin failed ran elsewhere than its partner: not a pair)."""
        return (self.image != other.image and self.pair_id == other.pair_id and self.partner == other.image
                and other.partner == self.image and self.cores == other.cores)


def turn_log_ratio(baseline: Optional[Turns], candidate: Optional[Turns]) -> Optional[float]:
    """A round in turns as one log ratio: the median over the blocks both measured (block i of each) of
    log(candidate block ms / baseline block ms), so a stall in one block moves one pair, as ``paired_draw``.
    None where the two did not take turns together or share no block (one lost the baton before its first)."""
    if baseline is None or candidate is None or not baseline.took_turns_with(candidate):
        return None
    shared = min(len(baseline.block_ms), len(candidate.block_ms))
    if not shared:
        return None
    logs = np.log(_positive(candidate.block_ms[:shared])) - np.log(_positive(baseline.block_ms[:shared]))
    return float(np.median(logs))


@dataclass(frozen=True)
class TurnRounds:
    """The rounds in turns of a comparison: each one's ``turn_log_ratio`` in round order, and how many rounds of
    either side (run, repeat index) had none (``left_out``: a side without turns, a lost baton, another pair_id)."""

    log_ratios: Tuple[float, ...]
    left_out: int


def rounds_in_turns(baseline_rounds, baseline_turns, candidate_rounds, candidate_turns) -> Optional[TurnRounds]:
    """The two sides' rounds in turns (``TurnRounds``), else None (judged as without turns). Each side gives its
    processes' rounds ((run, repeat index), as ``rounds_paired`` takes them) and, one each, their ``Turns`` or
    None; a round in turns is one both sides ran whose two processes took turns together (``turn_log_ratio``).
    MIN_PROCESSES or more such rounds are needed."""
    sides = [_by_round(rounds, turns) for rounds, turns in
             ((baseline_rounds, baseline_turns), (candidate_rounds, candidate_turns))]
    if sides[0] is None or sides[1] is None or _run(sides[0]) != _run(sides[1]):
        return None
    everyone = set(sides[0]) | set(sides[1])
    shared = sorted(set(sides[0]) & set(sides[1]), key=lambda key: key[1])
    found = [turn_log_ratio(sides[0][key], sides[1][key]) for key in shared]
    ratios = tuple(value for value in found if value is not None)
    if len(ratios) < MIN_PROCESSES:
        return None
    return TurnRounds(ratios, len(everyone) - len(ratios))


def judge_by_round_many(log_differences, *, margin_pct, confidence=CONFIDENCE) -> Judgements:
    """judge_by_round() of many comparisons at once: ``log_differences`` an array (comparisons, rounds)
    of log candidate - log baseline per round, MIN_PROCESSES or more rounds."""
    estimate, low, high, df = contrast_many([np.asarray(log_differences, dtype=float)], [1.0], confidence)
    critical = scipy_stats.t.ppf(0.5 + confidence / 2.0, df)
    with np.errstate(divide="ignore", invalid="ignore"):
        error = (high - estimate) / critical
        p_value = np.where(error > 0.0, 2.0 * scipy_stats.t.sf(np.abs(estimate) / error, df),
                           np.where(estimate == 0.0, 1.0, 0.0))
    detectable = _detectable(critical, df, error)
    bounds = (np.exp(low), np.exp(high))
    return Judgements(np.exp(estimate), *bounds, verdicts(*bounds, margin_pct), detectable, p_value)


@dataclass(frozen=True)
class RoundEffects:
    """Did a run's cells move together by round? ``effects``: each round's shared change against round 0 (a
    ratio, the median over cells; round 0's is 1), ``p_value``: two-way analysis of variance (cells x
    rounds, one process per cell and round) of the round effect; ``moved``: p_value < ``alpha``."""

    effects: Tuple[float, ...]
    p_value: float
    moved: bool

    def describe(self) -> str:
        shifts = ", ".join(f"round {index}: {arithmetic.percent(value):+.1f}%"
                           for index, value in enumerate(self.effects))
        if not self.moved:
            return f"The run's cells did not move together by round (p = {self.p_value:.2f}; {shifts})."
        return (f"The run's cells moved together by round (p = {self.p_value:.2g}; {shifts}): the machine's state "
                f"changed between rounds; comparisons paired by round cancel it, unpaired ones carry it as noise.")


def round_effects(by_cell, alpha: float = 0.01) -> Optional[RoundEffects]:
    """``by_cell``: per cell a list of its process estimates (ms) by round (the same rounds for every
    cell; a cell missing a round is left out). None with fewer than 3 complete cells or 2 rounds."""
    rows = [row for row in by_cell if row and all(value is not None and value > 0 for value in row)]
    if not rows:
        return None
    rounds = min(len(row) for row in rows)
    table = np.log(np.asarray([[float(value) for value in row[:rounds]] for row in rows]))
    cells = table.shape[0]
    if cells < 3 or rounds < 2:
        return None
    centred = table - table.mean(axis=1, keepdims=True)
    column = centred.mean(axis=0)
    residual = centred - column[None, :]
    between = cells * float(np.sum(column ** 2)) / (rounds - 1)
    error_df = (cells - 1) * (rounds - 1)
    within = float(np.sum(residual ** 2)) / error_df
    statistic = between / within if within > 0 else (math.inf if between > 0 else 0.0)
    p_value = float(scipy_stats.f.sf(statistic, rounds - 1, error_df)) if math.isfinite(statistic) else 0.0
    effects = tuple(float(np.exp(np.median(table[:, index] - table[:, 0]))) for index in range(rounds))
    return RoundEffects(effects, p_value, p_value < alpha)
