"""``repeats: auto`` and ``--budget``: processes go where the doubt is, within a run's wall time.

Every cell starts with ``repeats_min`` processes (``pending.first_repeats``); then, wave by wave, each
comparison the report makes (a cell against the same cell in the previous image, a compiled cell
against its image's eager cell and against its default cell) is judged from the process means
recorded so far as the report judges it (``matrixbench.report.stats.judge_sides``, at ``margin_pct``: paired
by round on the rounds both sides ran where the report pairs the kind, else Welch). A comparison still
undecided gets one more process on its side with fewer (both when even), up to ``repeats_max``; a
wave runs like any run (the scheduler's counterbalanced rounds), and the loop ends when every
comparison is decided, at the maximum, or held back by the budget. With fixed repeats there is
one wave (the matrix's repeats).

The budget (``--budget MINUTES``, wall time of this invocation) admits processes one at a time in
run order: one is admitted only while the time spent so far plus the estimate of everything
admitted (``Estimates`` of each process: this cell's own earlier processes, else earlier runs, else
the scheduler's model; divided by the slots that run at once) stays within it. What is left
undecided, and why (at the maximum, or the budget), goes to run.json's ``repeats`` and the run's
summary. Records are the state: a rerun judges every record there and goes on process by process.
"""
from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass, field
from functools import lru_cache
from statistics import mean
from typing import Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Protocol, Sequence, Set, Tuple, Union

from matrixbench.executors.scheduler import Estimates, fields, number
from matrixbench.matrix import Matrix
from matrixbench.matrix.comparisons import PAIRED_KINDS, Comparison, ImageCells, Roles, Side
from matrixbench.matrix.comparisons import comparisons as listed
from matrixbench.run.at_once import AtOnce
from matrixbench.run.pending import ImageWork, interleaved
from matrixbench.run.progress import format_duration
from matrixbench.run.results_files import Unvouched, read_record, warn
from runner.core import Cell, Repeat
from runner.schema import RecordError, record_path

AUTO = "auto"
# The stopping rule (issue 34): "spending" stops a comparison early only on a star at the strict
# interim level INTERIM_ALPHA (a Pocock-style constant boundary over the looks, the report's 95% at the
# end), on "no change", or as futile (``promising``); "final" decides only at the end, the waves
# allocating processes by the interval's width alone (never by its estimate). Chosen by simulation
# (benchmarks/bench_host_verdicts.py, results/host_verdicts.md): both hold the level (spending 3.1%
# false stars on the lognormal model, 2.4% on the fitted host; final 3.7% / 3.2%; the old rule, stop
# at the first verdict, 10.1% / 9.6%), and spending decides a 10% change 74.9% of the time against
# final's 45.6%, for 3.96 against 3.47 processes a side at no change.
FINAL, SPENDING = "final", "spending"
STOPPING_RULES = (FINAL, SPENDING)
INTERIM_ALPHA = 0.001


class Judgement(Protocol):
    """What the waves read of a judgement (``matrixbench.report.stats.Judgement``): the ratio, its interval
    (None when not tested), the verdict."""

    @property
    def ratio(self) -> float: ...

    @property
    def low(self) -> Optional[float]: ...

    @property
    def high(self) -> Optional[float]: ...

    @property
    def verdict(self) -> str: ...

    @property
    def decided(self) -> bool: ...


# Each estimate's round as the report keys it: (run, repeat index); the waves' run is None (this one).
RoundKeys = List[Tuple[Optional[str], int]]


class Judge(Protocol):
    """``matrixbench.report.stats.judge_sides``: one comparison judged from its sides' process means, paired by
    round where ``rounds`` (baseline's, candidate's) is given."""

    def __call__(self, baseline_means: Sequence[float], candidate_means: Sequence[float], /, *,
                 margin_pct: float, rounds: Optional[Tuple[RoundKeys, RoundKeys]] = None) -> Judgement: ...


@dataclass(frozen=True)
class Policy:
    """How many processes a cell gets: ``minimum`` first, up to ``maximum`` while in doubt
    (equal for fixed repeats); ``budget_s``: wall seconds of the run, None for no limit."""

    minimum: int
    maximum: int
    margin_pct: float
    budget_s: Optional[float] = None
    stopping: str = SPENDING

    @property
    def adaptive(self) -> bool:
        return self.maximum > self.minimum

    def describe(self) -> str:
        budget = f", budget {self.budget_s / 60:g} min" if self.budget_s is not None else ""
        if not self.adaptive:
            return f"repeats {self.minimum}{budget}"
        return (f"repeats auto: {self.minimum} to {self.maximum} processes per cell, more only where a "
                f"comparison is undecided at margin {self.margin_pct:g}%{budget}")


def policy_of(matrix: Matrix, budget_minutes: Optional[float] = None) -> Policy:
    """The matrix's repeats as a Policy (``repeats: auto`` -> repeats_min .. repeats_max)."""
    budget_s = None if budget_minutes is None else float(budget_minutes) * 60.0
    if isinstance(matrix.repeats, int):
        return Policy(matrix.repeats, matrix.repeats, matrix.margin_pct, budget_s)
    return Policy(matrix.repeats_min, max(matrix.repeats_min, matrix.repeats_max), matrix.margin_pct, budget_s)


def comparisons(works: Sequence[ImageWork], roles: Optional[Roles] = None) -> List[Comparison]:
    """The comparisons among ``works``' cells: matrixbench.matrix.comparisons' one list, the report's, with the
    images of each GPU type as one group (in matrix order) and ``roles`` the matrix's A/A twins and bridges."""
    groups: Dict[Optional[str], List[ImageCells]] = {}
    for work in works:
        groups.setdefault(work.gpu_type, []).append(ImageCells(work.label, work.image_name, work.cells))
    return listed(groups.values(), roles)


@dataclass
class Processes:
    """A side's recorded processes: its ok process estimates (``judged_estimate``), durations, the
    repeat indices taken and, beside each estimate, its repeat index (``rounds``: the round it ran in)."""

    means: List[float] = field(default_factory=list)
    durations: List[float] = field(default_factory=list)
    taken: Set[int] = field(default_factory=set)
    rounds: List[int] = field(default_factory=list)

    def round_keys(self) -> Optional[RoundKeys]:
        """Each estimate's round as the report keys it, (run, repeat index), the run being this one; None
        when the repeat indexes are not known for every estimate (a ``read`` that gives means only)."""
        if len(self.rounds) != len(self.means):
            return None
        return [(None, index) for index in self.rounds]

    def next_index(self) -> int:
        return min(index for index in range(len(self.taken) + 1) if index not in self.taken)


def recorded(work: ImageWork, cell: Cell, maximum: int, since: Optional[float] = None) -> Processes:
    """What the records of ``cell`` in ``work``'s folder say, repeats 0 .. maximum - 1; with ``since``
    (a time.time()) only those written since (a --force run: older records are to be replaced)."""
    found = Processes()
    for index in range(maximum):
        path = record_path(work.out_dir, cell, index)
        if not path.exists() or (since is not None and path.stat().st_mtime < since):
            continue
        found.taken.add(index)
        try:
            record = read_record(path)
        except Unvouched as exc:   # a negative, NaN or text mean: never a process of the statistics
            warn(exc, "not counted by repeats: auto")
            continue
        except RecordError:
            continue
        timing = fields(record.get("timing"))
        if record.get("status") == "ok" and timing.get("mean_ms"):
            found.means.append(judged_estimate(timing))
            found.rounds.append(index)
        if record.get("duration_s"):
            found.durations.append(number(record["duration_s"]))
    return found


def judged_estimate(timing: Mapping[str, object]) -> float:
    """What the report judges of one process (stats.judged_estimate: the trimmed mean of its samples_ms,
    else its mean_ms), so the waves decide on what the report will."""
    from matrixbench.report.stats import judged_estimate as estimate  # numpy, only when a record is read
    return estimate(timing.get("samples_ms") or [], number(timing["mean_ms"]))


@dataclass
class Doubt:
    """One comparison left undecided at the end, and why: "maximum", "futile" or "budget"."""

    comparison: Comparison
    verdict: str
    processes: Tuple[int, int]
    why: str

    def to_dict(self) -> Dict[str, object]:
        return {"comparison": self.comparison.describe(), "kind": self.comparison.kind, "verdict": self.verdict,
                "processes": list(self.processes), "why": self.why}


@dataclass
class Outcome:
    """What the waves did: how many, the processes they added, the comparisons left in doubt."""

    policy: Policy
    waves: int = 0
    added: int = 0
    decided: int = 0
    undecided: List[Doubt] = field(default_factory=list)
    held_back: int = 0            # processes the budget did not admit

    def to_dict(self) -> Dict[str, object]:
        """run.json's ``repeats``."""
        return {"policy": AUTO if self.policy.adaptive else "fixed", "minimum": self.policy.minimum,
                "maximum": self.policy.maximum, "margin_pct": self.policy.margin_pct,
                "budget_min": None if self.policy.budget_s is None else self.policy.budget_s / 60.0,
                "waves": self.waves, "added_processes": self.added, "held_back_processes": self.held_back,
                "decided": self.decided, "undecided": [doubt.to_dict() for doubt in self.undecided]}

    def describe(self) -> str:
        """The summary's line; empty for fixed repeats without a budget."""
        if not self.policy.adaptive:
            held = f"the budget held back {self.held_back} process(es)" if self.held_back else ""
            return f"{self.policy.describe()}: {held}" if held else ""
        if not self.undecided and not self.held_back:
            return f"{self.policy.describe()}: {self.decided} comparison(s) decided, {self.added} process(es) added"
        reasons = ", ".join(f"{sum(d.why == why for d in self.undecided)} at {why}"
                            for why in ("maximum", "futile", "budget") if any(d.why == why for d in self.undecided))
        held = f"; the budget held back {self.held_back} process(es)" if self.held_back else ""
        lines = [f"{self.policy.describe()}: {self.decided} comparison(s) decided, {len(self.undecided)} left "
                 f"UNDECIDED ({reasons or 'none'}){held}; {self.added} process(es) added"]
        lines += [f"  undecided: {d.comparison.describe()} ({d.processes[0]} vs {d.processes[1]} processes, {d.why})"
                  for d in self.undecided]
        return "\n".join(lines)


def bill_settings(matrix: Matrix) -> Dict[str, Union[bool, float, str]]:
    """The settings the bill depends on: paired blocks, the loop's minimum duration (issue 32), turns (issue 34)."""
    return {"paired": getattr(matrix, "paired", True), "min_time_s": getattr(matrix, "min_time_s", "auto"),
            "turns": getattr(matrix, "turns", False)}


def bill_seconds(policy: Policy, works: Sequence[ImageWork], parallel: int = 1,
                 estimates: Optional[Estimates] = None, runners: float = 0,
                 settings: Optional[Mapping[str, object]] = None, first_s: float = 0.0) -> Tuple[float, float]:
    """The run's estimated wall seconds, (at the minimum, at the maximum): its pending processes
    (``Estimates``) plus ``runners`` runner starts at what a start costs here (``Estimates.start_s``: as
    measured, else the generic start), over ``parallel`` runners, after ``first_s`` seconds that run alone before
    them (a dry run's noise check, run.noise_check.CheckPlan.seconds)."""
    estimate = estimates or Estimates(settings=settings)
    starts = estimate.start_s(works)[0] * runners if runners else 0.0
    first = starts + sum(estimate(work, repeat) for work in works for repeat in work.pending)
    extra = 0.0
    if policy.adaptive:
        extra = sum(estimate(work, Repeat(cell, 0)) * (policy.maximum - policy.minimum)
                    for work in works for cell in work.cells)
        if runners:   # the later waves' runners: as many a repeat index as the first wave's minimum ones
            extra += estimate.start_s(works)[0] * runners / max(policy.minimum, 1) * (policy.maximum - policy.minimum)
    return first_s + first / parallel, first_s + (first + extra) / parallel


def bill_span(policy: Policy, works: Sequence[ImageWork], at_once: AtOnce, estimates: Optional[Estimates] = None,
              runners: int = 0, first_s: float = 0.0) -> Tuple[float, float]:
    """``bill_seconds`` of a run whose works run in groups apart (``at_once``: one group on one machine; on a Ray
    cluster each GPU type's, on its own nodes): each group's processes and its share of the ``runners`` starts (its
    share of the pending processes: exact where every type runs the same cells) over its runners at once
    (``AtOnce.runners_of``); the run ends with its longest group, after ``first_s``."""
    estimate = estimates or Estimates()
    pending = sum(len(work.pending) for work in works)
    spans = [bill_seconds(policy, group, count, estimate,
                          runners * sum(len(work.pending) for work in group) / pending if pending else 0.0)
             for group, count in at_once.groups(works)]
    low, high = max((low for low, _ in spans), default=0.0), max((high for _, high in spans), default=0.0)
    return first_s + low, first_s + high


def bill(policy: Policy, works: Sequence[ImageWork], at_once: Optional[AtOnce] = None,
         estimates: Optional[Estimates] = None, runners: int = 0,
         settings: Optional[Mapping[str, object]] = None, noise_check_s: float = 0.0) -> str:
    """The run's estimated wall time before it starts (``bill_span``): its pending processes
    (earlier records of each cell, else this machine's pace, else the scheduler's model) and
    ``runners`` runner starts over the runners ``at_once`` (default one; it says where its figure came from: a Ray
    cluster's); with repeats auto the minimum (repeats_min a
    cell) and the maximum (every cell to repeats_max). ``settings``: the run's runner settings, so that the
    paired blocks and the loop's minimum duration are in the bill (issue 32); ``noise_check_s``: the noise check
    still ahead (a dry run's; a run prints its bill once the check is done, so 0 there)."""
    estimate = estimates or Estimates(settings=settings)
    at_once = at_once or AtOnce.here(1)
    low, high = bill_span(policy, works, at_once, estimate, runners, first_s=noise_check_s)
    start, measured = estimate.start_s(works) if runners else (0.0, False)
    source = f"({at_once.source}; " if at_once.source else "("
    source += "earlier records, else this machine's pace, else the scheduler's model"
    if runners:
        source += f"; {runners} runner start(s) at {start:.0f} s " + \
            ("as measured here" if measured else "each, a typical start: no record here shows one yet")
    source += f"; the noise check first, {noise_check_s:.0f} s)" if noise_check_s else ")"
    budget = f"; --budget {policy.budget_s / 60:g} min stops admitting processes past it" if policy.budget_s else ""
    runners_text = at_once.describe()
    if not policy.adaptive:
        return (f"estimated duration: {format_duration(low)} for {sum(len(p.pending) for p in works)} "
                f"process(es), {runners_text} {source}{budget}")
    return (f"estimated duration: {format_duration(low)} at the minimum ({policy.minimum} processes a "
            f"cell), up to {format_duration(high)} if every comparison stays undecided "
            f"({policy.maximum} a cell), {runners_text} {source}{budget}")


@dataclass(frozen=True)
class Spread:
    """What futility (``promising``) projects a comparison's interval with (issue 34): ``sd``, a standard deviation
    on the log scale, and which: of process means (``paired`` False, a comparison judged by Welch: the run's
    pooled spread, ``pooled_spread``) or of round log-ratios (``paired`` True, a comparison judged paired by round:
    the spread pooled over the run's paired comparisons of its kind, ``round_spread``). A state the rounds share
    is in the first and cancels from the second."""

    sd: float
    paired: bool = False

    def half_width(self, maximum: int) -> float:
        """The interval's half-width (log scale) at ``maximum`` processes a side: Welch's t at the report's df for
        equal sides (stats.equal_sides_df) x sd x sqrt(2 / m); paired by round, m rounds: t(m - 1) x sd / sqrt(m)."""
        from matrixbench.report.stats import CONFIDENCE, equal_sides_df
        quantile = 0.5 + CONFIDENCE / 2.0
        if self.paired:
            return _t(quantile, max(1, maximum - 1)) * self.sd / math.sqrt(maximum)
        return _t(quantile, max(1.0, equal_sides_df(maximum))) * self.sd * math.sqrt(2.0 / maximum)


def promising(judgement: Judgement, policy: Policy, spread: Optional[Spread]) -> bool:
    """Whether more processes, up to the maximum a side, could plausibly decide ``judgement``: the
    interval ``policy.maximum`` processes a side would give (``Spread.half_width``; ``Spread(sd)``: the run's
    pooled standard deviation of log process means, a Welch comparison's) would exclude no change, or fit
    inside the margin, around the estimate so far. A comparison judged paired by round is projected with the
    spread of round log-ratios (``Spread(sd, paired=True)``): a state the rounds share inflates the spread of
    process means but cancels from the paired interval, which would call it futile where more rounds decide it.
    The spreads are pooled over the run (steadier than one comparison's at 2-3 processes). One that could
    not (a change about the size of the margin, or noise too large for the maximum) is futile: it stays
    undecided and gets no more processes, which go to comparisons they can decide. Without a spread
    (nothing has 2 processes yet): promising."""
    if judgement.low is None or spread is None:
        return True
    estimate = abs(math.log(judgement.ratio))
    projected = spread.half_width(policy.maximum)
    return estimate > projected or estimate + projected < math.log(1.0 + policy.margin_pct / 100.0)


@lru_cache(maxsize=256)
def _t(quantile: float, df: Optional[float]) -> float:
    """Student's t quantile at ``df`` degrees of freedom (None: the normal's), looked up once: the waves ask for
    the same few at every look (scipy, imported only when a comparison is judged)."""
    from scipy.stats import norm, t
    return float(norm.ppf(quantile) if df is None else t.ppf(quantile, df))


def half_width(judgement: Judgement) -> Optional[float]:
    """The half-width of ``judgement``'s interval on the log scale (None when not tested): it does
    not depend on the estimate, only on the processes' spread and count."""
    if judgement.low is None or judgement.high is None:
        return None
    return (math.log(judgement.high) - math.log(judgement.low)) / 2.0


def goes_on(judgement: Judgement, policy: Policy, processes: int, rule: Optional[str] = None) -> bool:
    """The stopping rule, a pure function: does a comparison judged ``judgement`` (stats.judge at the
    confidence of the report, ``processes`` a side, the fewer) get more processes?

    ``final``: only while its interval is too wide to say "no change" at any estimate
    (half-width > log(1 + margin)) and ``policy.maximum`` processes a side could make it that narrow
    (the half-width scaled by sqrt(processes / maximum) and the t quantiles' ratio). Both look at the
    width alone, so where it stops is independent of the estimate and the verdict at the end holds
    the report's level. ``spending`` (the default): until a star at INTERIM_ALPHA or a "no change"
    (futility as ``promising``, by the caller)."""
    rule = rule or policy.stopping
    half = half_width(judgement)
    if half is None:
        return True
    if rule == FINAL:
        target = math.log(1.0 + policy.margin_pct / 100.0)
        if half <= target:
            return False
        from matrixbench.report.stats import CONFIDENCE, equal_sides_df
        quantile = 0.5 + CONFIDENCE / 2.0
        projected = (half * math.sqrt(processes / policy.maximum) * _t(quantile, equal_sides_df(policy.maximum))
                     / _t(quantile, max(1.0, equal_sides_df(processes))))
        return projected <= target
    if rule == SPENDING:
        if judgement.verdict == "no change":
            return False
        from matrixbench.report.stats import CONFIDENCE
        # the half-width over z (not t): the standard error times t/z, so the boundary is z_(1 - alpha/2) t/z standard
        # errors, which a t statistic of few df crosses more often than INTERIM_ALPHA (1.9% a look at 2 df): the
        # whole rule's level is what holds, as measured (docs/verdicts.md, "The interim boundary is laxer")
        error = half / _t(0.5 + CONFIDENCE / 2.0, None)
        return abs(math.log(judgement.ratio)) <= _t(1.0 - INTERIM_ALPHA / 2.0, None) * error
    raise ValueError(f"unknown stopping rule {rule!r}: one of {', '.join(STOPPING_RULES)}")


def pooled_spread(sides: Iterable[Processes]) -> Optional[float]:
    """The pooled standard deviation of log process means over ``sides`` (Processes) with 2 or more."""
    return _pooled_sd([math.log(value) for value in side.means] for side in sides)


def round_spread(log_ratios: Iterable[Sequence[float]]) -> Optional[float]:
    """The pooled standard deviation of round log-ratios (log candidate - log baseline, one a round) over
    comparisons paired by round, each with 2 or more rounds: what their paired intervals are made of."""
    return _pooled_sd(log_ratios)


def _pooled_sd(groups: Iterable[Sequence[float]]) -> Optional[float]:
    """The pooled standard deviation of ``groups`` (each about its own mean; those with 2 or more values), None
    without any."""
    squares, df = 0.0, 0
    for values in groups:
        if len(values) >= 2:
            centre = sum(values) / len(values)
            squares += sum((value - centre) ** 2 for value in values)
            df += len(values) - 1
    return math.sqrt(squares / df) if df else None


@dataclass(frozen=True)
class Spreads:
    """One look's spreads for futility: the run's pooled spread of log process means (None: no side has 2
    yet) and, by comparison kind, the spread of round log-ratios pooled over that kind's comparisons judged
    paired by round at this look (one comparison's 2-3 rounds are too few for a steady spread: at 2 df its
    estimate is below half the truth 1 time in 9, and a comparison judged futile on a low draw never gets the
    rounds that would show it; the kind's comparisons share the machine and the pairing, so pooling them
    gives tens of df at the first look)."""

    processes: Optional[float]
    rounds: Mapping[str, float] = field(default_factory=dict)

    def of(self, comparison: Comparison, judgement: Judgement) -> Optional[Spread]:
        """The spread ``promising`` projects ``judgement`` with: of round log-ratios where it was judged
        paired by round (its kind's), else of process means."""
        if _paired_by_round(judgement) and comparison.kind in self.rounds:
            return Spread(self.rounds[comparison.kind], paired=True)
        return None if self.processes is None else Spread(self.processes)


def _paired_by_round(judgement: Judgement) -> bool:
    from matrixbench.report.stats import PAIRED_BY_ROUND
    return getattr(judgement, "pairing", None) == PAIRED_BY_ROUND


def _round_log_ratios(judgement: Judgement, rounds: Optional[Tuple[RoundKeys, RoundKeys]], baseline: Processes,
                      candidate: Processes) -> Optional[List[float]]:
    """The round log-ratios a comparison judged paired by round was judged on (stats.rounds_paired: the rounds
    both sides ran), else None."""
    if rounds is None or not _paired_by_round(judgement):
        return None
    from matrixbench.report.stats import rounds_paired
    paired = rounds_paired(rounds[0], baseline.means, rounds[1], candidate.means)
    return None if paired is None else list(paired.log_ratios())


def default_judge() -> Judge:
    """The report's judgement (stats.judge_sides: paired by round where the report pairs the comparison, else
    Welch), so the waves stop on the verdict the report will give; numpy and scipy are imported only when a
    comparison is judged."""
    from matrixbench.report.stats import judge_sides
    return judge_sides


class Budget:
    """Admits processes while the run's wall time so far plus the estimate of what is admitted, spread over the
    runners ``at_once`` (one machine's: a count for every process; a Ray cluster's: each GPU type's processes over
    that type's runners, the longest type's span counting, as the bill's ``bill_span``), stays within ``budget_s``
    (None: everything is admitted)."""

    def __init__(self, budget_s: Optional[float], parallel: int = 1, clock: Optional[Callable[[], float]] = None):
        self.budget_s, self.at_once = budget_s, AtOnce.here(parallel)
        self._clock = clock or (lambda: time.monotonic())
        self.started = self._clock()

    def admit(self, estimates: Sequence[float], groups: Optional[Sequence[Optional[str]]] = None) -> int:
        """How many of ``estimates`` (seconds, in run order; ``groups``: each one's GPU type) fit: a prefix."""
        if self.budget_s is None:
            return len(estimates)
        spent = self._clock() - self.started
        queued: Dict[Optional[str], float] = {}   # each group's admitted seconds
        for count, (seconds, group) in enumerate(zip(estimates, groups or [None] * len(estimates))):
            key = group if group in self.at_once.runners else None
            queued[key] = queued.get(key, 0.0) + seconds
            if spent + max(total / self.at_once.runners_of(name) for name, total in queued.items()) > self.budget_s:
                return count
        return len(estimates)


class Waves:
    """The run's waves of processes: iterate for each wave's ImageWork list (only works with
    pending repeats); ``outcome`` says what was left in doubt once iteration ends."""

    def __init__(self, policy: Policy, works: Sequence[ImageWork], budget: Budget,
                 judge: Optional[Judge] = None, estimates: Optional[Callable[[ImageWork, Repeat], float]] = None,
                 read: Optional[Callable[[ImageWork, Cell, int], Processes]] = None, since: Optional[float] = None,
                 roles: Optional[Roles] = None):
        """``judge``: stats.judge_sides unless given (called with the sides' means, ``margin_pct`` and ``rounds``);
        ``estimates``: seconds of a process with no earlier one of its cell in this run (default ``Estimates``);
        ``read``: a side's processes (default ``recorded``, from its records, those written ``since`` with --force;
        benchmarks/bench_adaptive_repeats.py simulates them); ``roles``: the matrix's A/A twins and bridges
        (matrixbench.matrix.comparisons.roles_of)."""
        self.policy, self.works, self.budget = policy, list(works), budget
        self.roles = roles or Roles()
        self._judge = judge
        self._estimates = estimates or Estimates()
        self._read = read or (lambda work, cell, maximum: recorded(work, cell, maximum, since))
        self.outcome = Outcome(policy)

    def __iter__(self) -> Iterator[List[ImageWork]]:
        """The first wave has every image's work (those with nothing pending too: the summary counts what
        they skip); later ones only works with something to run."""
        wave = self._admitted([(work, list(work.pending)) for work in self.works], keep_empty=True)
        while wave:
            self.outcome.waves += 1
            yield wave
            wave = self._next() if self.policy.adaptive else []
        if self.policy.adaptive:
            self._judge_all(final=True)

    def _next(self) -> List[ImageWork]:
        """One more process for the side of every undecided comparison that has fewer (both when
        even: a balanced comparison narrows fastest), below the maximum."""
        wanted: Dict[Side, int] = {}
        for comparison, _, sides in self._judge_all(final=False):
            pair = (comparison.baseline, comparison.candidate)
            fewest = min(len(sides[side].taken) for side in pair)
            for side in pair:
                if len(sides[side].taken) == fewest < self.policy.maximum:
                    wanted[side] = sides[side].next_index()
        by_label = {work.label: work for work in self.works}
        parts = []
        for work in self.works:
            chosen = {(cell, index) for (label, cell), index in wanted.items() if label == work.label}
            if chosen:
                top = max(index for _, index in chosen) + 1
                order = [r for r in interleaved(work.cells, top, work.order_seed) if (r.cell, r.index) in chosen]
                parts.append((by_label[work.label], order))
        wave = self._admitted(parts)
        self.outcome.added += sum(len(work.pending) for work in wave)
        return wave

    def _admitted(self, parts: List[Tuple[ImageWork, List[Repeat]]], keep_empty: bool = False) -> List[ImageWork]:
        """``parts`` narrowed to what the budget admits, repeat index by repeat index (run order). Each process
        costs its estimate, and the first of each runner (a repeat index of an image) a runner's start too
        (``Estimates.start_s``, as the bill counts them)."""
        queue = sorted(((repeat.index, number, work, repeat) for number, (work, repeats) in enumerate(parts)
                        for repeat in repeats), key=lambda item: (item[0], item[1]))
        costs = [0.0] * len(queue)
        if self.budget.budget_s is not None:
            start, runner = self._start_s(), None
            for position, (index, number, work, repeat) in enumerate(queue):
                costs[position] = self._estimate(work, repeat) + (start if (index, number) != runner else 0.0)
                runner = (index, number)
        fits = self.budget.admit(costs, [work.gpu_type for _, _, work, _ in queue])
        if queue:   # the last wave that asked for any: what the budget kept from running (a later wave that
            self.outcome.held_back = len(queue) - fits     # asks for nothing leaves it as it was)
        admitted = {(work.label, repeat) for _, _, work, repeat in queue[:fits]}
        wave = []
        for work, repeats in parts:
            pending = [repeat for repeat in repeats if (work.label, repeat) in admitted]
            if pending or keep_empty:
                known = [repeat for repeat in pending if repeat not in work.repeats]
                wave.append(dataclasses.replace(work, pending=pending, repeats=tuple(work.repeats) + tuple(known)))
        return wave

    def _start_s(self) -> float:
        """What a runner's start costs (``Estimates.start_s``: as measured here, else the typical start); 0 for
        an estimate without starts (a simulation's)."""
        start_s = getattr(self._estimates, "start_s", None)
        return float(start_s(self.works)[0]) if start_s is not None else 0.0

    def _estimate(self, work: ImageWork, repeat: Repeat) -> float:
        durations = self._read(work, repeat.cell, self.policy.maximum).durations
        return mean(durations) if durations else self._estimates(work, repeat)

    def _judge_all(self, final: bool) -> List[Tuple[Comparison, Judgement, Dict[Side, Processes]]]:
        """The comparisons the stopping rule (``goes_on``; under ``spending`` also ``promising``) gives
        more processes, with their sides' processes; with ``final`` none, but the outcome's decided
        count and every undecided one (``_doubt``)."""
        judge = self._judge or default_judge()
        sides: Dict[Side, Processes] = {}
        doubts: List[Tuple[Comparison, Judgement, Dict[Side, Processes]]] = []
        going: List[Tuple[Comparison, Judgement, Dict[Side, Processes]]] = []
        ratios: Dict[str, List[List[float]]] = {}     # by kind: each paired comparison's round log-ratios
        decided = 0
        for comparison in comparisons(self.works, self.roles):
            baseline, candidate = (self._side(sides, side) for side in (comparison.baseline, comparison.candidate))
            if not baseline.means or not candidate.means:
                continue      # a side that failed every process: its records say why, more would not help
            rounds = self._rounds(comparison, baseline, candidate)
            judgement = judge(baseline.means, candidate.means, margin_pct=self.policy.margin_pct, rounds=rounds)
            paired = _round_log_ratios(judgement, rounds, baseline, candidate)
            if paired is not None:
                ratios.setdefault(comparison.kind, []).append(paired)
            if judgement.decided:
                decided += 1
            elif final:
                doubts.append((comparison, judgement, sides))
            if not final and self._goes_on(judgement, min(len(baseline.means), len(candidate.means))):
                going.append((comparison, judgement, sides))
        spreads = Spreads(pooled_spread(sides.values()),
                          {kind: sd for kind, found in ratios.items() if (sd := round_spread(found)) is not None})
        if final:
            self.outcome.decided = decided
            self.outcome.undecided = [self._doubt(comparison, judgement, sides, spreads.of(comparison, judgement))
                                      for comparison, judgement, sides in doubts]
            return []
        if self.policy.stopping == FINAL:
            return going
        return [doubt for doubt in going if promising(doubt[1], self.policy, spreads.of(doubt[0], doubt[1]))]

    def _side(self, sides: Dict[Side, Processes], side: Side) -> Processes:
        """``side``'s processes, read once a look into ``sides``."""
        if side not in sides:
            work = next(p for p in self.works if p.label == side[0])
            sides[side] = self._read(work, side[1], self.policy.maximum)
        return sides[side]

    @staticmethod
    def _rounds(comparison: Comparison, baseline: Processes,
                candidate: Processes) -> Optional[Tuple[RoundKeys, RoundKeys]]:
        """What the report pairs by round (stats.judge_sides' ``rounds``): both sides' rounds for a kind it
        pairs (PAIRED_KINDS), else None."""
        base, cand = baseline.round_keys(), candidate.round_keys()
        if comparison.kind not in PAIRED_KINDS or base is None or cand is None:
            return None
        return base, cand

    def _goes_on(self, judgement: Judgement, processes: int) -> bool:
        """``goes_on`` for a stats.Judgement; a judge double without an interval: while undecided."""
        if not hasattr(judgement, "high"):
            return not judgement.decided
        return goes_on(judgement, self.policy, processes)

    def _doubt(self, comparison: Comparison, judgement: Judgement, sides: Dict[Side, Processes],
               spread: Optional[Spread]) -> Doubt:
        """Why ``comparison`` stayed undecided: both sides at the maximum, futile (``promising``: the
        maximum could not decide it), else the budget held its processes back."""
        counts = (len(sides[comparison.baseline].taken), len(sides[comparison.candidate].taken))
        if min(counts) >= self.policy.maximum:
            why = "maximum"
        elif self.policy.stopping == FINAL and not goes_on(judgement, self.policy, min(counts)):
            why = "futile"
        elif self.policy.stopping != FINAL and not promising(judgement, self.policy, spread):
            why = "futile"
        else:
            why = "budget"
        return Doubt(comparison, judgement.verdict, counts, why)
