"""Image changes paired by round against unpaired, under drift and shared machine states (issue 34, item 4);
results/round_pairing.{json,md}.

A run's rounds (tests/hostsim.py ``run_rounds``): round r of the baseline and the candidate image ran one after
the other in the executors' counterbalanced order (A, B in even rounds; B, A in odd ones). On top of each
process's own noise (a lognormal process level of CV 1% or 5%, or the host fitted to the H100 records: the mean of
300 calls of a 4 ms launch-bound cell) the machine puts: nothing; a state each round shares (log-SD 5%); a 5%
linear drift over the run; a 5% step at the run's midpoint; or all three. Each comparison is judged paired by
round (stats.judge_by_round: Student's t on the rounds' log ratios) and unpaired (stats.judge: Welch on the two
sides' process means). At no change: the share starred, the share of 95% intervals holding the truth (1), the
share decided "no change" (margin 3%). At a true +10% change: the share starred "slower".
Every rate is a share of simulated comparisons of known truth; no record, no torch.
"""
import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from machine import describe, lscpu  # noqa: E402

import hostsim  # noqa: E402
from matrixbench.report import stats  # noqa: E402

MARGIN = 3.0
STARS = ("faster", "slower")
KEYS = ("stars", "coverage", "no_change", "power_10")
MACHINES = {"none": {}, "round state 5%": {"state_sd": 0.05}, "drift 5%": {"drift": 0.05},
            "step 5% mid-run": {"step": 0.05}, "all three": {"state_sd": 0.05, "drift": 0.05, "step": 0.05}}


def judged(baseline, candidate):
    """(verdicts, lows, highs) of both ways of judging: {"paired": ..., "unpaired": ...}."""
    paired = stats.judge_by_round_many(np.log(candidate) - np.log(baseline), margin_pct=MARGIN)
    unpaired = stats.judge_many(baseline, candidate, margin_pct=MARGIN)
    return {"paired": paired, "unpaired": unpaired}


def measure(rng, trials, rounds, noise, machine):
    found = {}
    base, cand = hostsim.run_rounds(rng, trials, rounds, **noise, **machine)
    for name, j in judged(base, cand).items():
        found[name] = {"stars": float(np.mean(np.isin(j.verdict, STARS))),
                       "coverage": float(np.mean((j.low <= 1.0) & (1.0 <= j.high))),
                       "no_change": float(np.mean(j.verdict == stats.NO_CHANGE))}
    base, cand = hostsim.run_rounds(rng, trials, rounds, change=0.10, **noise, **machine)
    for name, j in judged(base, cand).items():
        found[name]["power_10"] = float(np.mean(j.verdict == stats.SLOWER))
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=4000, help="comparisons per cell (lognormal)")
    parser.add_argument("--host-trials", type=int, default=2000, help="comparisons per cell (fitted host)")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "round_pairing")
    args = parser.parse_args()
    started = time.time()
    rng = np.random.default_rng(34)
    models = {"lognormal CV 1%": ({"cv": 0.01}, args.trials), "lognormal CV 5%": ({"cv": 0.05}, args.trials)}
    if hostsim.EVIDENCE.exists():
        models["fitted host (300 calls, 4 ms)"] = ({"host": hostsim.fit()[0]}, args.host_trials)
    results = []
    for model, (noise, trials) in models.items():
        for rounds in (3, 5, 10):
            for machine, factors in MACHINES.items():
                found = measure(rng, trials, rounds, noise, factors)
                results.append({"model": model, "rounds": rounds, "machine": machine, "trials": trials, **found})
                print(model, rounds, machine, found, flush=True)
    lines = ["# Image changes paired by round against unpaired (issue 34, item 4)", "",
             f"`benchmarks/bench_round_pairing.py`, seed 34; {describe(lscpu())}; {time.time() - started:.0f} s.", "",
             "At no change: starred, 95% interval holds the truth, decided \"no change\" (margin 3%); at a true +10%: "
             "starred \"slower\". Each cell: paired by round / unpaired.", "",
             "| model | rounds | machine | trials | starred at 0 | coverage at 0 | \"no change\" at 0 "
             "| starred at +10% |",
             "|---|---|---|---|---|---|---|---|"]
    for r in results:
        p, u = r["paired"], r["unpaired"]
        lines.append(f"| {r['model']} | {r['rounds']} | {r['machine']} | {r['trials']} | "
                     + " | ".join(f"{p[key]:.1%} / {u[key]:.1%}" for key in KEYS)
                     + " |")
    args.out.with_suffix(".json").write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    args.out.with_suffix(".md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
