"""Is paired by round above 5% under the fitted host at 3 rounds? (issue 34); results/host_level.{json,md}.

benchmarks/results/round_pairing.md found 6.3% false stars for image changes paired by round under the host
fitted to the H100 records at 3 rounds with a 5% drift (2,000 trials, standard error 0.5%), the highest of its 45
conditions. This reruns that condition and its neighbours (no machine effect, the drift, all three) with many
more trials (tests/hostsim.py ``run_rounds``: the mean of 300 calls of a 4 ms launch-bound cell, the executors'
counterbalanced rounds), judged paired by round (stats.judge_by_round_many) and unpaired (stats.judge_many) at
margin 3%: the share starred at no change with its binomial standard error, and the share of 95% intervals
holding the truth. Every rate is a share of simulated comparisons of known truth.
"""
import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from machine import contention, describe, describe_contention, lscpu  # noqa: E402

import hostsim  # noqa: E402
from matrixbench.report import stats  # noqa: E402

MACHINES = {"none": {}, "drift 5%": {"drift": 0.05}, "all three": {"state_sd": 0.05, "drift": 0.05, "step": 0.05}}


def rates(found, trials):
    stars = float(np.mean(np.isin(found.verdict, stats.STARRED)))
    return {"stars": stars, "se": math.sqrt(stars * (1 - stars) / trials),
            "coverage": float(np.mean((found.low <= 1.0) & (1.0 <= found.high)))}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=20000, help="comparisons per condition")
    parser.add_argument("--rounds", default="3", help="comma-separated round counts")
    parser.add_argument("--seed", type=int, default=36)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "host_level")
    args = parser.parse_args(argv)
    started = time.time()
    host, _ = hostsim.fit()
    rng = np.random.default_rng(args.seed)
    rows = []
    for rounds in (int(value) for value in args.rounds.split(",")):
        for name, machine in MACHINES.items():
            baseline, candidate = hostsim.run_rounds(rng, args.trials, rounds, host=host, **machine)
            paired = stats.judge_by_round_many(np.log(candidate) - np.log(baseline), margin_pct=3.0)
            unpaired = stats.judge_many(baseline, candidate, margin_pct=3.0)
            rows.append({"rounds": rounds, "machine": name, "trials": args.trials,
                         "paired": rates(paired, args.trials), "unpaired": rates(unpaired, args.trials)})
            print(rows[-1], flush=True)
    seconds = time.time() - started
    result = {"seed": args.seed, "machine": lscpu(), "load_average": [round(v, 2) for v in os.getloadavg()],
              "contention": contention(), "seconds": seconds, "rows": rows}
    args.out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    lines = ["# Paired by round under the fitted host: the level at many trials (issue 34)", "",
             f"`benchmarks/bench_host_level.py`, seed {args.seed}; {describe(result['machine'])} Load average "
             f"{result['load_average']}; {describe_contention(result['contention'])}; {seconds:.0f} s.", "",
             "The host fitted to the H100 records, a 4 ms launch-bound cell, 300 calls a process, at no change; margin "
             "3%. Starred (± one binomial standard error) and 95% intervals holding the truth.", "",
             "| rounds | machine | trials | starred, paired by round | coverage, paired | starred, unpaired "
             "| coverage, unpaired |", "|---|---|---|---|---|---|---|"]
    for row in rows:
        p, u = row["paired"], row["unpaired"]
        lines.append(f"| {row['rounds']} | {row['machine']} | {row['trials']} | {p['stars']:.2%} ± {p['se']:.2%} | "
                     f"{p['coverage']:.1%} | {u['stars']:.2%} ± {u['se']:.2%} | {u['coverage']:.1%} |")
    pooled = {}
    for rounds in sorted({row["rounds"] for row in rows}):
        chosen = [row for row in rows if row["rounds"] == rounds]
        total = sum(row["trials"] for row in chosen)
        stars = sum(row["paired"]["stars"] * row["trials"] for row in chosen) / total
        pooled[rounds] = (stars, math.sqrt(stars * (1 - stars) / total), total)
        lines.append(f"| {rounds} | pooled | {total} | {stars:.2%} ± {pooled[rounds][1]:.2%} | | | |")
    text = "\n".join(lines) + "\n"
    args.out.with_suffix(".md").write_text(text, encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
