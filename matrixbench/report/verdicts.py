"""Every comparison of two cells judged one way: stats.judge on their per-process means.

Image against image, mode against default, loaded against alone and compiled against eager all
go through ``judge_cells``; a speed-up (eager ms / compiled ms) is the compiled cell judged against
its eager cell with the ratio and its interval inverted, so its verdict reads the same way
("faster": the compiled cell runs faster). The margin is the setting matrixbench.matrix.settings declares
(``margin_pct``); a report uses its runs' (cells.CellIndex.margin_pct, on every row).

A change between two images, or a compiled mode against ``default`` of the same image (``pairable``), whose
processes ran in one run and share MIN_PROCESSES or more rounds (``by_round``: repeat indexes both sides ran) is
judged paired by round on those shared rounds (stats.judge_by_round: each round's two processes ran one after the
other under the same machine state, which cancels in their ratio; a round only one side ran is left out and
counted, ``pairing_text``); any other comparison is judged unpaired (stats.judge, Welch). An image change whose
rounds' two processes took turns (``in_turns``: docs/turns.md) in MIN_PROCESSES or more rounds is judged in turns on
those rounds (stats.rounds_in_turns: each round's median block log ratio; rounds without turns left out and counted).
stats.judge_sides makes that choice, for the report and for the waves of ``repeats: auto`` alike.
docs/verdicts.md has the simulations that chose this.
"""
from dataclasses import replace
from functools import lru_cache

from matrixbench.matrix.settings import BY_NAME
from matrixbench.report import arithmetic, stats
from matrixbench.report.cells import require_positive
from matrixbench.report.modes import MODE_CHANGE_BASELINE

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
    rounds = (tuple(map(tuple, baseline.get("process_rounds") or [])),
              tuple(map(tuple, candidate.get("process_rounds") or []))) if pairable(baseline, candidate) else None
    turns = in_turns(baseline, candidate) if rounds is not None else None
    judgement = _judge(tuple(judged_estimates(baseline)), tuple(judged_estimates(candidate)), margin_pct, rounds,
                       turns)
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


def pairable(baseline, candidate):
    """Whether the comparison's kind is judged paired by round where its rounds allow (matrix.comparisons'
    PAIRED_KINDS): two images' cells (an image change, an A/A change), or a compiled mode against the
    ``default`` cell of its image (a mode change). A speed-up (against eager: its paired view is the paired
    blocks) and the calibration's loaded against alone (one cell, two phases) are not."""
    if baseline.get("image") != candidate.get("image"):
        return True
    return baseline.get("cell.mode") == MODE_CHANGE_BASELINE and candidate.get("cell.mode") != MODE_CHANGE_BASELINE


def in_turns(baseline, candidate):
    """The sides' processes' turns (each a stats.Turns or None, as ``process_rounds``) where an image change may
    have been measured in turns (two images' cells); else None. stats.rounds_in_turns finds the rounds in turns."""
    if baseline.get("image") == candidate.get("image"):
        return None
    return tuple(baseline.get("process_turns") or []), tuple(candidate.get("process_turns") or [])


def by_round(baseline, candidate):
    """The sides' estimates on the rounds both ran (stats.RoundPairs, in round order) where the design pairs them
    by round: a ``pairable`` comparison whose ok processes ran in one run (cells.process_round), each repeat index
    once a side, MIN_PROCESSES or more of them on both sides (stats.rounds_paired); else None (judged unpaired)."""
    if not pairable(baseline, candidate):
        return None
    return stats.rounds_paired(baseline.get("process_rounds") or [], judged_estimates(baseline),
                               candidate.get("process_rounds") or [], judged_estimates(candidate))


def pairing_text(judgement):
    """"in turns", "paired by round" or "unpaired" (stats.PAIRINGS; comparisons.csv's ``pairing``); "" when not
    tested."""
    return "" if judgement.low is None else judgement.pairing


# Why a paired comparison's rounds were left out, by pairing (pairing_description)
LEFT_OUT_WHY = {stats.PAIRED_BY_ROUND: "only one side ran", stats.IN_TURNS: "not in turns"}


def rounds_judged_text(judgement):
    """"5 of 7 rounds" where a comparison paired by round left out rounds only one side ran, or one in turns rounds
    without turns (its ratio is then the one on the judged rounds, not the ratio of the two cells' ms, which are
    over all their processes); else ""."""
    left_out = judgement.rounds_left_out
    if pairing_text(judgement) not in LEFT_OUT_WHY or not left_out:
        return ""
    return f"{judgement.paired_rounds} of {judgement.paired_rounds + left_out} rounds"


def not_the_ms_ratio(judgement):
    """Why ``percent(judgement)`` is not the ratio of the two cells' ms (each the geometric mean of its processes'
    means), as its pairing (stats.IN_TURNS: the blocks' change; stats.PAIRED_BY_ROUND: on the rounds both cells
    ran, others left out); "" where it is (unpaired, or paired by round on every round: the same ratio)."""
    found = pairing_text(judgement)
    if found == stats.IN_TURNS or (found == stats.PAIRED_BY_ROUND and judgement.rounds_left_out):
        return found
    return ""


def pairing_description(judgement):
    """``pairing_text`` in words for a table, with the rounds left out where there were any: "paired by round (5 of
    7 rounds; 2 only one side ran)", "in turns (2 of 3 rounds; 1 not in turns)"."""
    found, rounds = pairing_text(judgement), rounds_judged_text(judgement)
    return f"{found} ({rounds}; {judgement.rounds_left_out} {LEFT_OUT_WHY[found]})" if rounds else found


def throttled(*rows):
    """Did a side throttle (runner.gpu_state/runner.energy's flag)? Then its latency is not the GPU's
    full speed, and a comparison with it is never decided (never starred): at most undecided."""
    return any("throttled" in (row.get("timing.flags") or ()) for row in rows)


@lru_cache(maxsize=4096)
def _judge(baseline_means, candidate_means, margin_pct, rounds, turns):
    """stats.judge_sides, once per pair: tables, charts and comparisons.csv all ask for the same ones (every
    argument a tuple, stats.Turns frozen: hashable)."""
    return stats.judge_sides(baseline_means, candidate_means, margin_pct=margin_pct, rounds=rounds, turns=turns)


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
