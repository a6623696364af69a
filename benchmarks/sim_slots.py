"""Scheduling simulation for slots (issue 15): the default matrix on 1, 2, 4 and 8 slots.

No run on real hardware here: cell durations come from a documented model, because this
repository holds no real GPU records of the default matrix (tests/fixtures are synthetic and
benchmarks/results holds CPU overhead measurements only). The model: a cell takes
``matrixbench.executors.scheduler.MODEL_S[mode]`` seconds (eager 10 s, default 60 s, reduce-overhead 75 s,
max-autotune 300 s) times a per-model factor; scenario "equal" gives every model factor 1,
scenario "spread" draws each model's factor from a log-normal (sigma 0.6, seed 15), so that models
differ by ~3x as ViT-sized and DETR-sized models do. Units are scheduled as ``matrixbench.run.command``
does (``scheduler.make_units`` / ``run_on_slots``: longest first, each slot takes the next unit
when it is free; no earlier records, so every estimate is the model's).
Two unit sizes are compared: one model at one batch size in every image (what ``--slots`` runs,
``scheduler.unit_key``; still one GPU per torch-version comparison of a cell) and one model in every
image (issue 15's first design, kept for comparison: 11 units are too few for 8 slots).

    python benchmarks/sim_slots.py      # writes results/sim_slots.{json,md} and prints the table
"""
import heapq
import json
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from matrixbench.executors.scheduler import MODEL_S, unit_key  # noqa: E402
from matrixbench.matrix import expand_cells, load_matrix  # noqa: E402
from runner.core import Repeat  # noqa: E402

SLOTS = (1, 2, 4, 8)
TARGET = 1.15


def makespan(durations, slots):
    """Greedy list scheduling of ``durations`` (already in order) on ``slots`` slots."""
    free = [0.0] * slots
    heapq.heapify(free)
    for duration in durations:
        heapq.heappush(free, heapq.heappop(free) + duration)
    return max(free)


def unit_durations(cells, images, factor, by_batch):
    """Each unit's modelled seconds, longest first (the order of scheduler.make_units)."""
    units = {}
    for cell in cells:
        key = unit_key(Repeat(cell)) if by_batch else cell.model
        units[key] = units.get(key, 0.0) + len(images) * MODEL_S[cell.mode] * factor[cell.model]
    return sorted(units.values(), reverse=True)


def main():
    matrix = load_matrix(ROOT / "matrix.yaml")
    cells = expand_cells(matrix)
    total_cells = len(cells) * len(matrix.images)
    models = sorted(matrix.models)
    rng = random.Random(15)
    scenarios = {"equal": {m: 1.0 for m in models},
                 "spread": {m: rng.lognormvariate(0.0, 0.6) for m in models}}
    rows = []
    for scenario, factor in scenarios.items():
        for by_batch in (True, False):
            durations = unit_durations(cells, matrix.images, factor, by_batch)
            total = sum(durations)
            for slots in SLOTS:
                span = makespan(durations, slots)
                unit = "model x batch size (used)" if by_batch else "model (issue's first design)"
                rows.append({"scenario": scenario, "unit": unit,
                             "units": len(durations), "slots": slots, "makespan_h": span / 3600,
                             "ideal_h": total / slots / 3600, "ratio": span / (total / slots)})
    table = ["| durations | unit | units | slots | makespan (h) | ideal (h) | makespan / ideal |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    table += [f"| {r['scenario']} | {r['unit']} | {r['units']} | {r['slots']} | {r['makespan_h']:.2f} | "
              f"{r['ideal_h']:.2f} | {r['ratio']:.2f}{' (over target)' if r['ratio'] > TARGET else ''} |"
              for r in rows]
    header = (f"Default matrix: {total_cells} cells ({len(matrix.images)} images x {len(models)} models). "
              f"Modelled durations (see sim_slots.py), not measurements. Target: makespan <= {TARGET} x ideal "
              "at 8 slots.\n\n")
    out = ROOT / "benchmarks" / "results"
    (out / "sim_slots.md").write_text(header + "\n".join(table) + "\n")
    (out / "sim_slots.json").write_text(json.dumps({"cells": total_cells, "model_s": MODEL_S,
                                                    "factors": scenarios, "rows": rows}, indent=2) + "\n")
    print(header + "\n".join(table))


if __name__ == "__main__":
    main()
