"""repeats: auto against fixed repeats on simulated cells with planted changes (issue 21).

Each trial is one model's cell in two images (A, B): B's true latency is A's x (1 + change), the
change drawn from 0, 3% and 10% (slower or faster); every process's mean is the truth x
exp(N(0, between-process CV)) (CV drawn per cell from 2-5%, as GPU clocks and placement give),
x the mean of 300 iterations' noise (1-3% each) and a rare outlier (1% of processes +10..30%).
No torch, no records: ``matrixbench.executors.adaptive.Waves`` (the real policy) runs its waves on
``ImageWork`` plans whose processes this script simulates, judged by the report's
``stats.judge`` at the margin given. A verdict is correct when its claim is true: "faster" with a
change below 0, "slower" above 0, "no change" with |change| <= the margin; "undecided" is no claim.

Compared: fixed repeats 3, 5 and 10 against auto (--auto MIN-MAX processes a side, default 2-10
and 3-10). Target: the first auto's share of correct verdicts >= fixed 5's with <= 60% of fixed
5's processes; its false claims (wrong decided verdicts) are shown too. Auto 3-10 cannot meet the
60% by arithmetic (3 of 5 processes before any is added): it is shown for what the minimum costs.
Writes results/adaptive_repeats.{json,md}.
"""
import argparse
import json
import math
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from machine import contention, describe, lscpu  # noqa: E402

from matrixbench.executors import adaptive  # noqa: E402
from matrixbench.report.stats import judge, judge_sides  # noqa: E402
from matrixbench.run.pending import ImageWork  # noqa: E402
from runner.core import Cell, Repeat  # noqa: E402

CHANGES = (0.0, 0.03, -0.03, 0.10, -0.10)
ITERATIONS = 300


@dataclass
class Trial:
    """One comparison's planted truth and the random stream of its processes."""

    cell: Cell
    change: float
    cv: float
    iteration_cv: float
    rng: random.Random

    def process_mean(self, image):
        truth = 10.0 * (1.0 + self.change if image == "B" else 1.0)
        offset = math.exp(self.rng.gauss(0.0, self.cv))
        iterations = 1.0 + self.rng.gauss(0.0, self.iteration_cv / math.sqrt(ITERATIONS))
        outlier = 1.0 + self.rng.uniform(0.1, 0.3) if self.rng.random() < 0.01 else 1.0
        return truth * offset * iterations * outlier


def trials(count, seed):
    rng = random.Random(seed)
    return [Trial(Cell(f"m{index}", "image-classification", "random", "full", 1, "eager", False, "float32"),
                  CHANGES[index % len(CHANGES)], rng.uniform(0.02, 0.05), rng.uniform(0.01, 0.03),
                  random.Random(rng.randrange(2**32)))
            for index in range(count)]


def simulate(policy, chosen, tmp):
    """Run ``policy``'s waves over ``chosen`` trials; return (verdicts by trial index, processes)."""
    cells = [trial.cell for trial in chosen]
    by_model = {trial.cell.model: trial for trial in chosen}
    plans = [ImageWork(image, tmp / image, cells, [Repeat(c, i) for i in range(policy.minimum) for c in cells],
                       repeats=tuple(Repeat(c, i) for i in range(policy.minimum) for c in cells), order_seed=0)
             for image in ("A", "B")]
    means = {}

    def read(plan, cell, maximum):
        found = means.get((plan.label, cell), [])
        return adaptive.Processes(list(found), [1.0] * len(found), set(range(len(found))))

    waves = adaptive.Waves(policy, plans, adaptive.Budget(None), judge=judge_sides, estimates=lambda plan, repeat: 1.0,
                           read=read)
    processes = 0
    for wave in waves:
        for plan in wave:
            for repeat in plan.pending:
                means.setdefault((plan.label, repeat.cell), []).append(by_model[repeat.cell.model]
                                                                       .process_mean(plan.label))
                processes += 1
    verdicts = [judge(means["A", trial.cell], means["B", trial.cell], margin_pct=policy.margin_pct).verdict
                for trial in chosen]
    return verdicts, processes


MODES = ("eager", "default", "reduce-overhead")
SPEEDUPS = {"eager": 1.0, "default": 1.3, "reduce-overhead": 1.8}


def matrix_trials(count, seed):
    """The real matrix shape (issue 34): per model 3 modes x 2 images, each cell's image change drawn
    from CHANGES; comparisons as the run makes them (image changes, speed-ups, mode changes)."""
    rng = random.Random(seed)
    found = []
    for index in range(count):
        cv, iteration_cv = rng.uniform(0.02, 0.05), rng.uniform(0.01, 0.03)
        for mode in MODES:
            cell = Cell(f"m{index}", "image-classification", "random", "full", 1, mode, False, "float32")
            found.append(Trial(cell, rng.choice(CHANGES), cv, iteration_cv, random.Random(rng.randrange(2**32))))
    return found


def simulate_matrix(policy, chosen, tmp):
    """Waves over the matrix shape: returns [(kind, true ratio candidate/baseline, verdict)], processes."""
    cells = [trial.cell for trial in chosen]
    by_cell = {trial.cell: trial for trial in chosen}
    plans = [ImageWork(image, tmp / image, cells, [Repeat(c, i) for i in range(policy.minimum) for c in cells],
                       repeats=tuple(Repeat(c, i) for i in range(policy.minimum) for c in cells), order_seed=0)
             for image in ("A", "B")]
    means = {}

    def truth(image, cell):
        trial = by_cell[cell]
        return 10.0 / SPEEDUPS[cell.mode] * (1.0 + trial.change if image == "B" else 1.0)

    def draw(image, cell):
        trial = by_cell[cell]
        return trial.process_mean(image) / (10.0 * (1.0 + trial.change if image == "B" else 1.0)) * truth(image, cell)

    def read(plan, cell, maximum):
        found = means.get((plan.label, cell), [])
        return adaptive.Processes(list(found), [1.0] * len(found), set(range(len(found))))

    waves = adaptive.Waves(policy, plans, adaptive.Budget(None), judge=judge_sides, estimates=lambda plan, repeat: 1.0,
                           read=read)
    processes = 0
    for wave in waves:
        for plan in wave:
            for repeat in plan.pending:
                means.setdefault((plan.label, repeat.cell), []).append(draw(plan.label, repeat.cell))
                processes += 1
    found = []
    for comparison in adaptive.comparisons(plans):
        (image_a, cell_a), (image_b, cell_b) = comparison.baseline, comparison.candidate
        ratio = truth(image_b, cell_b) / truth(image_a, cell_a)
        verdict = judge(means[image_a, cell_a], means[image_b, cell_b], margin_pct=policy.margin_pct).verdict
        found.append((comparison.kind, ratio, verdict))
    return found, processes


def score_matrix(name, policy, all_trials, batch, tmp):
    """Correct verdicts, wrong claims (charged: net = correct - wrong) and processes on the matrix shape."""
    rows, processes = [], 0
    step = batch * len(MODES)
    for start in range(0, len(all_trials), step):
        found, used = simulate_matrix(policy, all_trials[start:start + step], tmp)
        rows += found
        processes += used
    good = sum(correct(v, r - 1.0, policy.margin_pct) for _, r, v in rows)
    wrong = sum(v in ("faster", "slower", "no change") and not correct(v, r - 1.0, policy.margin_pct)
                for _, r, v in rows)
    false_star = [v in ("faster", "slower") for _, r, v in rows if abs(r - 1.0) < 1e-12]
    return {"name": name, "minimum": policy.minimum, "maximum": policy.maximum, "processes": processes,
            "processes_per_side": processes / len(all_trials) / 2, "correct": good / len(rows),
            "wrong_claim": wrong / len(rows), "net": (good - wrong) / len(rows), "comparisons": len(rows),
            "false_star_at_no_change": sum(false_star) / max(len(false_star), 1)}


def markdown_matrix(result):
    lines = [f"# repeats auto vs fixed repeats on the matrix shape ({result['models']} models x 3 modes x 2 images, "
             f"{result['comparisons']} comparisons, margin {result['margin_pct']:g}%)", "",
             "Per model: eager, default (1.3x) and reduce-overhead (1.8x) in images A and B; each cell's image change "
             "drawn from 0, +-3%, +-10%; between-process CV 2-5% per model, iteration noise 1-3%, 1% outlier "
             "processes. Comparisons as a run makes them: image changes, speed-ups (compiled vs eager), mode changes "
             "(vs default). "
             "Correct: a decided verdict whose claim is true; wrong claims are charged (net = correct - wrong). "
             f"Stopping rule of auto: {result['stopping']}.", "",
             "| policy | processes a side | vs fixed 5 | correct | wrong claims | net | false stars at no change |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    fixed5 = next(row for row in result["policies"] if row["name"] == "fixed 5")
    for row in result["policies"]:
        share = row["processes"] / fixed5["processes"]
        lines.append(f"| {row['name']} | {row['processes_per_side']:.2f} | {share:.0%} "
                     f"| {row['correct']:.1%} | {row['wrong_claim']:.1%} | {row['net']:.1%} | "
                     f"{row['false_star_at_no_change']:.1%} |")
    lines += ["", describe(result["machine"]), f"Load average {result['load_average']}; contention "
              f"{result['contention']}; {result['seconds']:.0f} s."]
    return "\n".join(lines) + "\n"


def correct(verdict, change, margin_pct):
    return {"faster": change < 0, "slower": change > 0,
            "no change": abs(change) * 100 <= margin_pct + 1e-9}.get(verdict, False)


def score(name, policy, all_trials, batch, tmp):
    verdicts, processes = [], 0
    for start in range(0, len(all_trials), batch):
        found, used = simulate(policy, all_trials[start:start + batch], tmp)
        verdicts += found
        processes += used
    rows = {}
    for change in sorted({abs(trial.change) for trial in all_trials}):
        picked = [(verdict, trial) for verdict, trial in zip(verdicts, all_trials) if abs(trial.change) == change]
        rows[f"{change:.0%}"] = {
            "correct": sum(correct(v, t.change, policy.margin_pct) for v, t in picked) / len(picked),
            "wrong_claim": sum(v in ("faster", "slower", "no change") and not correct(v, t.change, policy.margin_pct)
                               for v, t in picked) / len(picked),
            "undecided": sum(v in ("undecided", "not tested") for v, _ in picked) / len(picked)}
    good = sum(correct(v, t.change, policy.margin_pct) for v, t in zip(verdicts, all_trials))
    wrong = sum(v in ("faster", "slower", "no change") and not correct(v, t.change, policy.margin_pct)
                for v, t in zip(verdicts, all_trials))
    return {"name": name, "minimum": policy.minimum, "maximum": policy.maximum, "processes": processes,
            "processes_per_side": processes / (2 * len(all_trials)), "correct": good / len(all_trials),
            "wrong_claim": wrong / len(all_trials), "by_change": rows}


def markdown(result):
    lines = [f"# repeats auto vs fixed repeats ({result['trials']} simulated comparisons, margin "
             f"{result['margin_pct']:g}%)", "",
             "Changes 0, +-3%, +-10% (equal shares); between-process CV 2-5%, iteration noise 1-3%, 1% outlier "
             "processes. Correct: a decided verdict whose claim is true.", "",
             "| policy | processes a side | vs fixed 5 | correct | wrong claims | correct at 0 / 3% / 10% |",
             "| --- | --- | --- | --- | --- | --- |"]
    fixed5 = next(row for row in result["policies"] if row["name"] == "fixed 5")
    for row in result["policies"]:
        by = " / ".join(f"{row['by_change'][key]['correct']:.1%}" for key in ("0%", "3%", "10%"))
        lines.append(f"| {row['name']} | {row['processes_per_side']:.2f} | "
                     f"{row['processes'] / fixed5['processes']:.0%} | {row['correct']:.1%} | "
                     f"{row['wrong_claim']:.1%} | {by} |")
    lines += ["", f"Target (auto {result['auto']}): correct >= fixed 5's with <= 60% of its processes: "
              f"**{'met' if result['target_met'] else 'NOT met'}**.", "",
              describe(result["machine"]), f"Load average {result['load_average']}; contention {result['contention']}; "
              f"{result['seconds']:.0f} s."]
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=1000)
    parser.add_argument("--auto", default="2-10,3-10", help="auto policies MIN-MAX, comma-separated; the first "
                        "is held to the target")
    parser.add_argument("--margin", type=float, default=3.0)
    parser.add_argument("--batch", type=int, default=50, help="comparisons per simulated run")
    parser.add_argument("--seed", type=int, default=21)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    parser.add_argument("--shape", choices=("pairs", "matrix"), default="pairs",
                        help="matrix: 3 modes x 2 images per model, every comparison a run makes (issue 34)")
    args = parser.parse_args(argv)
    if args.shape == "matrix":
        return main_matrix(args)
    started, load = time.monotonic(), list(__import__("os").getloadavg())
    all_trials = trials(args.trials, args.seed)
    tmp = Path("/nonexistent-bench-adaptive")          # the simulation reads no records
    policies = [(f"fixed {n}", adaptive.Policy(n, n, args.margin)) for n in (3, 5, 10)]
    autos = [tuple(int(n) for n in text.split("-")) for text in args.auto.split(",")]
    policies += [(f"auto {low}-{high}", adaptive.Policy(low, high, args.margin)) for low, high in autos]
    rows = []
    for name, policy in policies:
        for trial, fresh in zip(all_trials, trials(args.trials, args.seed)):
            trial.rng = fresh.rng        # every policy sees the same process stream per comparison
        rows.append(score(name, policy, all_trials, args.batch, tmp))
    fixed5, auto = rows[1], rows[3]
    result = {"trials": args.trials, "margin_pct": args.margin, "auto": args.auto.split(",")[0],
              "policies": rows, "machine": lscpu(), "load_average": load, "contention": contention(),
              "target_met": auto["correct"] >= fixed5["correct"] and auto["processes"] <= 0.6 * fixed5["processes"],
              "seconds": time.monotonic() - started}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "adaptive_repeats.json").write_text(json.dumps(result, indent=2) + "\n")
    text = markdown(result)
    (args.out / "adaptive_repeats.md").write_text(text)
    print(text)
    return 0 if result["target_met"] else 1


def main_matrix(args):
    started, load = time.monotonic(), list(__import__("os").getloadavg())
    models = max(1, args.trials // len(MODES))
    tmp = Path("/nonexistent-bench-adaptive")
    policies = [(f"fixed {n}", adaptive.Policy(n, n, args.margin)) for n in (3, 5, 10)]
    autos = [tuple(int(n) for n in text.split("-")) for text in args.auto.split(",")]
    policies += [(f"auto {low}-{high}", adaptive.Policy(low, high, args.margin)) for low, high in autos]
    rows = []
    for name, policy in policies:
        rows.append(score_matrix(name, policy, matrix_trials(models, args.seed), args.batch, tmp))
    result = {"models": models, "margin_pct": args.margin, "policies": rows, "comparisons": rows[0]["comparisons"],
              "stopping": adaptive.Policy(3, 10, args.margin).stopping, "machine": lscpu(), "load_average": load,
              "contention": contention(), "seconds": time.monotonic() - started}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "adaptive_repeats_matrix.json").write_text(json.dumps(result, indent=2) + "\n")
    text = markdown_matrix(result)
    (args.out / "adaptive_repeats_matrix.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
