"""repeats: auto's waves, then the report's paired-by-round verdicts (issue 34); results/auto_pairing.{json,md}.

tests/autosim.py ``run_auto``: the real waves (executors.adaptive.Waves, auto 3-10, the spending rule, margin 3%)
over simulated cells of known truth, each model's processes run in the executors' order on its own clock, then
every comparison judged as the report judges it (verdicts.judge_cells: paired by round on the rounds both cells
ran, else Welch). Process noise: a lognormal level of log-SD 1% or 5%, or the host fitted to the H100
records (the mean of 300 calls of a 4 ms launch-bound cell). The machine: nothing; a state each round shares
(log-SD 5%); a linear drift (5% per first wave, going on through later waves); a step of 5% from the middle of
the first wave on; all three.

1. Image changes (one eager cell per model in images A and B): the waves judging unpaired (Welch, as before)
   against the waves judging as the report does (stats.judge_sides, now): at no change the share starred, the
   share of 95% intervals holding the truth, "no change", processes a cell; at a true +10% the share starred
   "slower".
2. Mode changes (eager, default and reduce-overhead per model in both images; reduce-overhead as fast as default,
   or 10% slower): fixed repeats 3 and auto, each mode change judged paired by round (the report: on the rounds
   both cells ran, since issue 34's shared rounds; before, only where they ran the same rounds) and unpaired
   (Welch on the same processes).
3. Futility (``adaptive.promising``) under auto 3-10: a comparison judged paired by round projected with the run's
   pooled spread of process means (before; tests/autosim.py ``futility_on_process_spread``) against the spread of
   round log-ratios pooled over its kind (now), image changes and, under a round state, mode changes: the same
   figures as 1 and 2.
Every rate is a share of simulated comparisons of known truth; no record, no torch.
"""
import argparse
import os
import sys
import time
from contextlib import nullcontext
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from machine import describe, describe_contention, write_results  # noqa: E402

import autosim  # noqa: E402
import hostsim  # noqa: E402
from matrixbench.executors import adaptive  # noqa: E402

MACHINES = {"none": autosim.Machine(), "round state 5%": autosim.Machine(state_sd=0.05),
            "drift 5%": autosim.Machine(drift=0.05), "step 5%": autosim.Machine(step=0.05),
            "all three": autosim.Machine(0.05, 0.05, 0.05)}
AUTO = adaptive.Policy(3, 10, 3.0)
MODELS_A_RUN = 25


def noises(args, trials=None):
    found = {"lognormal CV 1%": (autosim.lognormal(0.01), trials or args.trials),
             "lognormal CV 5%": (autosim.lognormal(0.05), trials or args.trials)}
    if hostsim.EVIDENCE.exists() and args.host_trials:
        found["fitted host (300 calls, 4 ms)"] = (autosim.host(hostsim.fit()[0]), trials or args.host_trials)
    return found


def image_changes(args, seed):
    rows = []
    for noise_name, (noise, trials) in noises(args).items():
        for machine_name, machine in MACHINES.items():
            row = {"noise": noise_name, "machine": machine_name, "trials": trials}
            for waves, judge in (("unpaired", autosim.unpaired_judge), ("as the report", None)):
                null, per_cell = autosim.many(trials, MODELS_A_RUN, AUTO, noise, seed, machine=machine, judge=judge)
                changed, _ = autosim.many(trials, MODELS_A_RUN, AUTO, noise, seed + 1, machine=machine, judge=judge,
                                          truth=autosim.Truth(change=0.10))
                row[waves] = {**autosim.rates(null, ["image_change"]), "processes_a_cell": per_cell,
                              "power_10": autosim.rates(changed, ["image_change"])["right_star"]}
            rows.append(row)
            print(row, flush=True)
    return rows


def mode_changes(args, seed):
    rows = []
    slower = autosim.Truth(speedups={**autosim.SPEEDUPS, "reduce-overhead": autosim.SPEEDUPS["default"] / 1.10})
    for noise_name, (noise, trials) in noises(args, args.mode_trials).items():
        for machine_name, machine in MACHINES.items():
            policies = (("fixed 3", adaptive.Policy(3, 3, 3.0)), ("auto 3-10", AUTO))
            for policy_name, policy in policies:
                null, per_cell = autosim.many(trials, MODELS_A_RUN, policy, noise, seed, machine=machine,
                                              modes=autosim.MATRIX)
                changed, _ = autosim.many(trials, MODELS_A_RUN, policy, noise, seed + 1, machine=machine,
                                          modes=autosim.MATRIX, truth=slower)
                row = {"noise": noise_name, "machine": machine_name, "policy": policy_name, "trials": trials,
                       "processes_a_cell": per_cell}
                for name, unpaired in (("paired", False), ("unpaired", True)):
                    row[name] = {**autosim.rates(null, ["mode_change"], unpaired),
                                 "power_10": autosim.rates(changed, ["mode_change"], unpaired)["right_star"]}
                row["image_change"] = autosim.rates(null, ["image_change"])
                rows.append(row)
                print(row, flush=True)
    return rows


def futility(args, seed):
    """Section 3: each condition with futility on the process spread (before) and on the round spread (now)."""
    rows = []
    slower = autosim.Truth(speedups={**autosim.SPEEDUPS, "reduce-overhead": autosim.SPEEDUPS["default"] / 1.10})
    shapes = [("image changes", autosim.PAIR, "image_change", autosim.Truth(change=0.10), args.futility_trials,
               MACHINES)]
    if args.futility_mode_trials:
        shapes.append(("mode changes", autosim.MATRIX, "mode_change", slower, args.futility_mode_trials,
                       {name: MACHINES[name] for name in ("round state 5%", "all three")}))
    noises_used = (("lognormal CV 1%", autosim.lognormal(0.01)), ("lognormal CV 5%", autosim.lognormal(0.05)))
    for noise_name, noise in noises_used:
        for shape, modes, kind, changed_truth, trials, machines in shapes:
            if shape == "mode changes" and noise_name != "lognormal CV 1%":
                continue
            for machine_name, machine in machines.items():
                row = {"noise": noise_name, "shape": shape, "machine": machine_name, "trials": trials}
                for name in ("process spread", "round spread"):
                    with autosim.futility_on_process_spread() if name == "process spread" else nullcontext():
                        null, per_cell = autosim.many(trials, MODELS_A_RUN, AUTO, noise, seed, machine=machine,
                                                      modes=modes)
                        changed, _ = autosim.many(trials, MODELS_A_RUN, AUTO, noise, seed + 1, machine=machine,
                                                  modes=modes, truth=changed_truth)
                    row[name] = {**autosim.rates(null, [kind]), "processes_a_cell": per_cell,
                                 "power_10": autosim.rates(changed, [kind])["right_star"]}
                rows.append(row)
                print(row, flush=True)
    return rows


def pct(value):
    return f"{value:.1%}"


def markdown(result):
    lines = ["# repeats auto's waves, then the report's paired verdicts (issue 34)", "",
             f"`benchmarks/bench_auto_pairing.py`, seed {result['seed']}; {describe(result['machine'])} "
             f"Load average {result['load_average']}; {describe_contention(result['contention'])}; "
             f"{result['seconds']:.0f} s.", ""]
    if result["image_changes"]:
        lines += section_1(result)
    if result["mode_changes"]:
        lines += section_2(result)
    if result.get("futility"):
        lines += section_3(result)
    return "\n".join(lines) + "\n"


def section_1(result):
    lines = ["## 1. Image changes: auto 3-10 (spending, margin 3%), the waves judging unpaired / as the report does",
             "",
             "At no change: starred, 95% intervals holding the truth, \"no change\", processes a cell; at a true +10%: "
             "starred \"slower\". Each cell: waves unpaired (before) / waves as the report (now); the report pairs by "
             "round in both.", "",
             "| noise | machine | trials | starred at 0 | coverage at 0 | \"no change\" at 0 | processes a cell at 0 "
             "| starred at +10% | paired by round |", "|---|---|---|---|---|---|---|---|---|"]
    for row in result["image_changes"]:
        before, now = row["unpaired"], row["as the report"]
        cells = [f"{pct(before[key])} / {pct(now[key])}" for key in ("stars", "coverage", "no_change")]
        cells.append(f"{before['processes_a_cell']:.2f} / {now['processes_a_cell']:.2f}")
        cells.append(f"{pct(before['power_10'])} / {pct(now['power_10'])}")
        cells.append(f"{pct(before['paired'])} / {pct(now['paired'])}")
        lines.append(f"| {row['noise']} | {row['machine']} | {row['trials']} | " + " | ".join(cells) + " |")
    return lines + [""]


def section_2(result):
    lines = ["## 2. Mode changes (reduce-overhead against default): paired by round (the report) / unpaired", "",
              "Eager, default and reduce-overhead per model in images A and B. At no change (reduce-overhead as fast "
              "as default): starred, coverage, \"no change\"; at reduce-overhead 10% slower: starred \"slower\"; each "
              "paired by round / unpaired on the same processes. The image changes of the same runs (all at no "
              "change), as the report judges them: starred and coverage.", "",
              "| noise | machine | policy | trials | processes a cell | starred at 0 | coverage at 0 "
              "| \"no change\" at 0 | starred at +10% | paired by round | image changes: starred, coverage |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in result["mode_changes"]:
        paired, unpaired = row["paired"], row["unpaired"]
        cells = [f"{pct(paired[key])} / {pct(unpaired[key])}" for key in ("stars", "coverage", "no_change", "power_10")]
        images = row["image_change"]
        lines.append(f"| {row['noise']} | {row['machine']} | {row['policy']} | {row['trials']} | "
                     f"{row['processes_a_cell']:.2f} | " + " | ".join(cells)
                     + f" | {pct(paired['paired'])} | {pct(images['stars'])}, {pct(images['coverage'])} |")
    return lines + [""]


def section_3(result):
    lines = ["## 3. Futility: a paired comparison projected with the process spread (before) / the round spread (now)",
             "", "Auto 3-10 (spending, margin 3%), judged as the report does. At no change: starred, 95% intervals "
             "holding the truth, \"no change\", processes a cell; at a true +10% (mode changes: reduce-overhead 10% "
             "slower): starred \"slower\". Each cell: futility on the pooled spread of process means (before) / "
             "paired comparisons on their kind's pooled spread of round log-ratios (now); both share their draws.", "",
             "| noise | comparisons | machine | trials | starred at 0 | coverage at 0 | \"no change\" at 0 "
             "| processes a cell at 0 | starred at +10% | paired by round |", "|---" * 10 + "|"]
    for row in result["futility"]:
        before, now = row["process spread"], row["round spread"]
        cells = [f"{pct(before[key])} / {pct(now[key])}" for key in ("stars", "coverage", "no_change")]
        cells.append(f"{before['processes_a_cell']:.2f} / {now['processes_a_cell']:.2f}")
        cells += [f"{pct(before[key])} / {pct(now[key])}" for key in ("power_10", "paired")]
        lines.append(f"| {row['noise']} | {row['shape']} | {row['machine']} | {row['trials']} | "
                     + " | ".join(cells) + " |")
    return lines + [""]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=2000, help="comparisons per condition (lognormal)")
    parser.add_argument("--host-trials", type=int, default=500, help="comparisons per condition (fitted host); 0: none")
    parser.add_argument("--mode-trials", type=int, default=400, help="models per condition (section 2)")
    parser.add_argument("--futility-trials", type=int, default=600, help="image changes per condition (section 3)")
    parser.add_argument("--futility-mode-trials", type=int, default=100,
                        help="models per condition, mode changes (section 3); 0: none")
    parser.add_argument("--sections", default="1,2",
                        help="which sections: 1 (image changes), 2 (mode changes), 3 (futility before / now)")
    parser.add_argument("--seed", type=int, default=34)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "auto_pairing")
    args = parser.parse_args(argv)
    started, load = time.monotonic(), [round(value, 2) for value in os.getloadavg()]
    sections = set(args.sections.split(","))
    result = {"seed": args.seed, "trials": args.trials, "host_trials": args.host_trials,
              "image_changes": image_changes(args, args.seed) if "1" in sections else [],
              "mode_changes": mode_changes(args, args.seed + 10) if "2" in sections else [],
              "futility": futility(args, args.seed + 20) if "3" in sections else []}
    write_results(args.out.parent, args.out.name, result, markdown, load=load, started=started)

if __name__ == "__main__":
    main()
