"""A run of ``repeats: auto`` from its first wave to its report, on processes of known truth (issue 34).

``run_auto`` drives the real waves (matrixbench.executors.adaptive.Waves: its stopping rule, futility and
allocation) over simulated cells, then judges every comparison of the list as the report does
(matrixbench.report.verdicts.judge_cells on the combined rows the records would give: each process's mean
and its round, one run): what auto left is what the report sees.

The truth: each model has its cells in two images A and B (``modes``: eager alone, the "pair" shape, or
eager, default and reduce-overhead, the matrix shape); a cell's true ms is ``base_ms`` / its mode's speed-up
x (1 + ``change``) in B. A process's mean is the truth x its own noise (a lognormal level of log-SD ``cv``,
or the mean of ``calls`` calls of the host fitted to the H100 records: tests/hostsim.py) x the machine's
factor at the moment it ran. The machine (``Machine``) runs each model's processes in the executors' order
(executors.scheduler.rounds: repeat index by repeat index, images counterbalanced; the modes in the order
pending.interleaved gives, reversed on odd repeats), one after the other on the model's own clock: a
state each round shares (log-SD ``state_sd``), a linear drift (``drift`` slower per first wave's length,
going on at that rate through later waves) and a step (``step`` slower from the middle of the first wave
on). Numbers only: no torch, no records.
"""
from __future__ import annotations

import math
import random
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from matrixbench.executors import adaptive
from matrixbench.executors.scheduler import rounds as run_order
from matrixbench.report import stats, verdicts
from matrixbench.run.pending import ImageWork, interleaved
from runner.core import Cell

SPEEDUPS = {"eager": 1.0, "default": 1.3, "reduce-overhead": 1.3}   # reduce-overhead = default: a null mode change
PAIR, MATRIX = ("eager",), ("eager", "default", "reduce-overhead")


@dataclass(frozen=True)
class Machine:
    state_sd: float = 0.0
    drift: float = 0.0
    step: float = 0.0


@dataclass(frozen=True)
class Truth:
    change: float = 0.0                                   # B / A - 1, every cell
    speedups: Dict[str, float] = field(default_factory=lambda: dict(SPEEDUPS))
    base_ms: float = 4.0

    def ms(self, image: str, mode: str) -> float:
        return self.base_ms / self.speedups[mode] * (1.0 + self.change if image == "B" else 1.0)


Noise = Callable[[np.random.Generator, float], float]      # (rng, true ms) -> one process's mean


def lognormal(cv: float) -> Noise:
    return lambda rng, ms: ms * math.exp(rng.normal(0.0, cv))


def host(fitted, calls: int = 300) -> Noise:
    return lambda rng, ms: float(fitted.process(rng, ms, calls).mean())


def unpaired_judge(baseline, candidate, *, margin_pct, rounds=None):
    """The waves' judgement before issue 34's last stop: Welch on every comparison, rounds ignored."""
    return stats.judge(baseline, candidate, margin_pct=margin_pct)


@contextmanager
def futility_on_process_spread():
    """Within it, the waves' futility projects every comparison with the run's pooled spread of process means, as
    before issue 34's paired projection (adaptive.Spreads.of never the round log-ratios'): the benchmark's and the
    tests' "before"."""
    def of(self, comparison, judgement):
        return None if self.processes is None else adaptive.Spread(self.processes)
    saved = adaptive.Spreads.of
    adaptive.Spreads.of = of
    try:
        yield
    finally:
        adaptive.Spreads.of = saved


@dataclass
class Judged:
    kind: str
    truth: float            # candidate / baseline (a speed-up's: compiled / eager, as judge_cells reads it)
    judgement: stats.Judgement        # the report's (verdicts.judge_cells)
    unpaired: stats.Judgement         # Welch on the same processes (stats.judge), for comparison


def run_auto(rng: np.random.Generator, models: int, policy: adaptive.Policy, noise: Noise, *,
             machine: Machine = Machine(), truth: Truth = Truth(), modes: Sequence[str] = PAIR,
             judge: Optional[Callable] = None, seed: int = 0) -> Tuple[List[Judged], int, adaptive.Outcome]:
    """One run of ``models`` models: the waves (``judge``: the waves' judgement, default the report's), then the
    report's verdict of every comparison. Returns (the judged comparisons, the processes run, the waves' outcome)."""
    cells = [Cell(f"m{index}", "image-classification", "random", "full", 1, mode, False, "float32")
             for index in range(models) for mode in modes]
    tmp = Path("/nonexistent-autosim")
    plans = [ImageWork(image, tmp / image, cells, interleaved(cells, policy.minimum, seed),
                       repeats=tuple(interleaved(cells, policy.minimum, seed)), order_seed=seed)
             for image in ("A", "B")]
    found: Dict[Tuple[str, Cell], adaptive.Processes] = {}
    clock: Dict[str, int] = {}
    states: Dict[Tuple[str, int], float] = {}
    first_wave = 2 * len(modes) * policy.minimum

    def factor(model: str, index: int) -> float:
        tick = clock.get(model, 0)
        clock[model] = tick + 1
        if (model, index) not in states:
            states[model, index] = rng.normal(0.0, machine.state_sd) if machine.state_sd else 0.0
        step = 1.0 + machine.step if tick >= first_wave / 2 else 1.0
        return math.exp(states[model, index]) * (1.0 + machine.drift * tick / first_wave) * step

    def read(plan, cell, maximum):
        return found.get((plan.label, cell), adaptive.Processes())

    waves = adaptive.Waves(policy, plans, adaptive.Budget(None), judge=_remembered(judge or adaptive.default_judge()),
                           estimates=lambda plan, repeat: 1.0, read=read)
    processes = 0
    for wave in waves:
        for model in dict.fromkeys(cell.model for cell in cells):
            parts = [(plan, [r for r in plan.pending if r.cell.model == model]) for plan in wave]
            for plan, chosen in run_order([(plan, chosen) for plan, chosen in parts if chosen]):
                for repeat in chosen:
                    side = found.setdefault((plan.label, repeat.cell), adaptive.Processes())
                    mean = noise(rng, truth.ms(plan.label, repeat.cell.mode)) * factor(model, repeat.index)
                    side.means.append(mean)
                    side.rounds.append(repeat.index)
                    side.taken.add(repeat.index)
                    side.durations.append(1.0)
                    processes += 1
    judged = []
    for comparison in adaptive.comparisons(plans):
        rows = [_row(side, found[side]) for side in (comparison.baseline, comparison.candidate)]
        ratio = truth.ms(*_image_mode(comparison.candidate)) / truth.ms(*_image_mode(comparison.baseline))
        welch = stats.judge(rows[0]["process_means"], rows[1]["process_means"], margin_pct=policy.margin_pct)
        judged.append(Judged(comparison.kind, ratio, verdicts.judge_cells(*rows, margin_pct=policy.margin_pct), welch))
    return judged, processes, waves.outcome


def _remembered(judge):
    """``judge`` once per set of processes: the waves judge every comparison at every look, those that stopped
    on the same processes as before (the answers are the same; the simulation only runs faster)."""
    known = {}

    def judged(baseline, candidate, *, margin_pct, rounds=None):
        key = (tuple(baseline), tuple(candidate), margin_pct, None if rounds is None else tuple(map(tuple, rounds)))
        if key not in known:
            known[key] = judge(baseline, candidate, margin_pct=margin_pct, rounds=rounds)
        return known[key]
    return judged


def _image_mode(side):
    return side[0], side[1].mode


def _row(side, processes):
    """The combined row (cells.combine_repeats) the report would build of one side's records."""
    image, cell = side
    return {"image": image, "cell.mode": cell.mode, "process_means": list(processes.means), "process_samples": [],
            "process_rounds": [("run", index) for index in processes.rounds], "source": f"{image}/{cell.id}"}


def rates(judged: Sequence[Judged], kinds: Sequence[str], unpaired: bool = False) -> Dict[str, float]:
    """Over the judged comparisons of ``kinds``: the share starred, the share of 95% intervals holding the
    truth (tested ones), the share decided "no change", the share starred the right way, the share paired by
    round, and their count; ``unpaired``: of the Welch judgements instead of the report's."""
    chosen = [Judged(found.kind, found.truth, found.unpaired if unpaired else found.judgement, found.unpaired)
              for found in judged if found.kind in kinds]
    tested = [found for found in chosen if found.judgement.low is not None]
    right = [stats.SLOWER if found.truth > 1 else stats.FASTER for found in chosen]
    return {"comparisons": len(chosen),
            "stars": float(np.mean([found.judgement.starred for found in chosen])),
            "coverage": float(np.mean([found.judgement.low <= found.truth <= found.judgement.high
                                       for found in tested])),
            "no_change": float(np.mean([found.judgement.verdict == stats.NO_CHANGE for found in chosen])),
            "right_star": float(np.mean([found.judgement.verdict == way for found, way in zip(chosen, right)])),
            "paired": float(np.mean([found.judgement.pairing == stats.PAIRED_BY_ROUND for found in tested]))}


def many(trials: int, models: int, policy: adaptive.Policy, noise: Noise, seed: int,
         **kwargs) -> Tuple[List[Judged], float]:
    """``trials`` comparisons' worth of runs of ``models`` models each: (every judged comparison, processes a
    cell on average)."""
    rng = np.random.default_rng(seed)
    judged: List[Judged] = []
    processes = cells = 0
    for run in range(max(1, trials // models)):
        found, used, _ = run_auto(rng, models, policy, noise, seed=random.Random(seed + run).randrange(1 << 30),
                                  **kwargs)
        judged += found
        processes += used
        cells += 2 * models * len(kwargs.get("modes", PAIR))
    return judged, processes / cells
