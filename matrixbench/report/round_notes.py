"""The report's plain line on a run whose cells moved together by round (issue 34, item 4).

The executors run a model's cells round by round (repeat index r of every image in turn: executors.scheduler),
so a machine state that lasts a round (a warm-up, a step, another tenant) moves every cell of that round alike.
``lines`` groups each run's processes by round (cells.process_round: run, repeat index), one row per cell, and
asks stats.round_effects (two-way analysis of variance of log process estimates, cells x rounds, at 1%) whether
the rounds differ; where they do, one note names the run, the rounds and each round's shared change.
"""
from __future__ import annotations

from typing import Any, Dict, List, Mapping, Sequence, Tuple

from matrixbench.report import stats, verdicts

MIN_CELLS = 3     # stats.round_effects needs 3 cells and 2 rounds


def lines(rows: Sequence[Mapping[str, Any]]) -> List[str]:
    """One note per run and device whose cells moved together by round (stats.round_effects), in order."""
    runs: Dict[Tuple[str, str], List[Dict[int, float]]] = {}
    for row in rows:
        rounds = row.get("process_rounds") or []
        if len(rounds) < 2:
            continue
        estimates = verdicts.judged_estimates(row)
        if len(estimates) != len(rounds):
            continue
        by_run: Dict[str, Dict[int, float]] = {}
        for (run, repeat), estimate in zip(rounds, estimates):
            if run is not None and repeat is not None:
                by_run.setdefault(str(run), {})[int(repeat)] = float(estimate)
        for run, found in by_run.items():
            runs.setdefault((str(row["device_name"]), run), []).append(found)
    found_lines = []
    for (device, run), cells in runs.items():
        rounds = _rounds(cells)
        if not rounds:
            continue
        table = [[cell[index] for index in range(rounds)] for cell in cells if all(i in cell for i in range(rounds))]
        effects = stats.round_effects(table)
        if effects is not None and effects.moved:
            text = effects.describe()
            found_lines.append(f"Run {run.split('@')[0]} on {device}, {len(table)} cells in rounds 0-{rounds - 1}: "
                               f"{text[0].lower()}{text[1:]}")
    return found_lines


def _rounds(cells: Sequence[Mapping[int, float]]) -> int:
    """How many rounds (0 to k - 1) to read: the k with the most cell-rounds of information, (k - 1) x the cells
    that have every one of them, with MIN_CELLS cells or more; 0 when none."""
    best, most = 0, 0
    for k in range(2, max((len(cell) for cell in cells), default=0) + 1):
        count = sum(all(index in cell for index in range(k)) for cell in cells)
        if count >= MIN_CELLS and count * (k - 1) > most:
            best, most = k, count * (k - 1)
    return best
