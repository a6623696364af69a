"""Every comparison of two cells judged one way: stats.judge on their per-process means.

Image against image, mode against default, loaded against alone and compiled against eager all
go through ``judge_cells``; a speed-up (eager ms / compiled ms) is the compiled cell judged against
its eager cell with the ratio and its interval inverted, so its verdict reads the same way
("faster": the compiled cell runs faster). The margin is the setting matrixbench.matrix.settings declares
(``margin_pct``); a report uses its runs' (cells.CellIndex.margin_pct, on every row).

A change between two images whose processes ran in the same rounds of one run (``by_round``: the same run,
the same repeat indexes on both sides) is judged paired by round (stats.judge_by_round: each round's two
processes ran one after the other under the same machine state, which cancels in their ratio); any other
comparison is judged unpaired (stats.judge, Welch). docs/verdicts.md has the simulation that chose this.
"""
from dataclasses import replace
from functools import lru_cache

from matrixbench.matrix.settings import BY_NAME
from matrixbench.report import arithmetic, stats
from matrixbench.report.cells import require_positive

MARGIN_PCT = float(BY_NAME["margin_pct"].default)
STAR = "*"
UNDECIDED_MARK = "?"
NO_CHANGE_MARK = "≈"
MARKS = {stats.FASTER: STAR, stats.SLOWER: STAR, stats.UNDECIDED: UNDECIDED_MARK, stats.NO_CHANGE: NO_CHANGE_MARK,
         stats.UNTESTED: ""}
NOT_TESTED_TEXT = "not tested: one process per cell"
# What a verdict judges per process (issue 34): stats.JUDGED_ESTIMATE of its calls (the mean, the number
# the cell's ms in tables, charts and the published comparison show; docs/verdicts.md says why not the
# trimmed mean). A process with fewer than stats.MIN_SAMPLES samples is judged on its mean.


def judge_cells(baseline, candidate, margin_pct=None) -> stats.Judgement:
    """candidate against baseline, two combined cell rows (cells.combine_repeats) that ran, at
    ``margin_pct`` (default: the rows' ``margin_pct``, else MARGIN_PCT); a latency that is not a
    positive number is a ReportError naming its record."""
    if margin_pct is None:
        margin_pct = candidate.get("margin_pct") or MARGIN_PCT
    rounds = by_round(baseline, candidate)
    if rounds is not None:
        judgement = _judge_rounds(*rounds, margin_pct)
    else:
        judgement = _judge(tuple(judged_estimates(baseline)), tuple(judged_estimates(candidate)), margin_pct)
    if judgement.decided and throttled(baseline, candidate):
        return replace(judgement, verdict=stats.UNDECIDED)
    return judgement


def judged_estimates(row, how=None):
    """A combined cell row's per-process estimates the verdict judges: stats.judged_estimate of each
    ok process (its ``process_samples``, its mean)."""
    means = require_positive(row)
    samples = row.get("process_samples") or []
    if len(samples) != len(means):
        return list(means)
    return [stats.judged_estimate(values, mean, how) for values, mean in zip(samples, means)]


def by_round(baseline, candidate):
    """(baseline estimates, candidate estimates) in round order where the design pairs them by round: two
    images' cells whose ok processes ran in one run with the same repeat indexes (cells.process_round), each
    index once a side, MIN_PROCESSES or more; else None (judged unpaired). A cell against a cell of its own
    image (a speed-up, a mode change) is never paired here."""
    if baseline.get("image") == candidate.get("image"):
        return None
    sides = []
    for row in (baseline, candidate):
        rounds = row.get("process_rounds") or []
        estimates = judged_estimates(row)
        if len(rounds) != len(estimates) or len(set(rounds)) != len(rounds) or len({run for run, _ in rounds}) != 1:
            return None
        sides.append(dict(zip(rounds, estimates)))
    if set(sides[0]) != set(sides[1]) or len(sides[0]) < stats.MIN_PROCESSES:
        return None
    order = sorted(sides[0], key=lambda key: key[1])
    return tuple(sides[0][key] for key in order), tuple(sides[1][key] for key in order)


def pairing_text(judgement):
    """"paired by round" or "unpaired" (stats.PAIRINGS); "" when not tested."""
    return "" if judgement.low is None else judgement.pairing


def throttled(*rows):
    """Did a side throttle (runner.gpu_state/runner.energy's flag)? Then its latency is not the GPU's
    full speed, and a comparison with it is never decided (never starred): at most undecided."""
    return any("throttled" in (row.get("timing.flags") or ()) for row in rows)


@lru_cache(maxsize=4096)
def _judge(baseline_means, candidate_means, margin_pct):
    """stats.judge, once per pair: tables, charts and comparisons.csv all ask for the same ones."""
    return stats.judge(baseline_means, candidate_means, margin_pct=margin_pct)


@lru_cache(maxsize=4096)
def _judge_rounds(baseline_by_round, candidate_by_round, margin_pct):
    return stats.judge_by_round(baseline_by_round, candidate_by_round, margin_pct=margin_pct)


def judge_speedup(eager, compiled, margin_pct=None) -> stats.Judgement:
    """The speed-up eager / compiled with its interval: ratio, low and high are speed-ups here."""
    found = judge_cells(eager, compiled, margin_pct)
    if found.low is None or found.high is None:
        return replace(found, ratio=1.0 / found.ratio)
    return replace(found, ratio=1.0 / found.ratio, low=1.0 / found.high, high=1.0 / found.low)


def percent(judgement):
    """The judged ratio as a %: a change (negative is faster), or for a speed-up % faster."""
    return arithmetic.percent(judgement.ratio)


def marked(judgement, text):
    """``text`` with the verdict's mark: * faster or slower, ? undecided, ≈ no change."""
    return text + MARKS[judgement.verdict]


def interval_pct(judgement):
    """"[-3.1%, +0.4%]", or the not-tested text."""
    if judgement.low is None:
        return NOT_TESTED_TEXT
    return f"[{arithmetic.percent(judgement.low):+.1f}%, {arithmetic.percent(judgement.high):+.1f}%]"


def verdict_text(judgement):
    """The verdict in words, "no change (±2%)" naming the margin."""
    if judgement.verdict == stats.NO_CHANGE:
        return f"{stats.NO_CHANGE} (±{judgement.margin_pct:g}%)"
    return judgement.verdict
