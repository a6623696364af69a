"""Image-change power at a true +10% in a launch-bound cell at 3 processes (issue 34); results/image_power.{json,md}.

The target: at least 50% power for a +10% image change of a launch-bound cell at 3 processes a side under the host
fitted to the H100 records, at the loop length the runner uses by default for such cells. Three questions:

1. What would it take? At 3 rounds paired by round (2 degrees of freedom), the spread of the rounds' log ratios
   that gives 50% power at +10% (the noncentral t), and the same for Welch at 3 against 3 (4 df).
2. The fitted host (tests/hostsim.py ``fit``) puts a level on each process (log-SD ``residual_sd``) that no
   loop length and no pairing removes. The evidence's records say more: the launch-bound cells of one model that
   ran in the same round (eager and default of DETR, repeat 0 and 1) moved together between the rounds, so part of
   that level may be a state the round shares. ``split`` reads it from the records: per model, the log ratio
   round 1 / round 0 of each launch-bound cell; the part the cells of one round do not share is a quarter of the
   mean squared difference of two cells' ratios (a per-process variance, host noise included); the rest of the
   fitted residual is shared by the round.
3. Power at +10% and false stars at no change, 3 rounds, a 4 ms cell, paired by round and unpaired, at 300 to 3,000
   calls a process (GPU time of one process's loop: calls x 4 ms), under the fitted host and under its split.
Every rate is a share of simulated comparisons of known truth.
"""
import argparse
import json
import math
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
from scipy import optimize
from scipy import stats as scipy_stats

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from machine import contention, describe, describe_contention, lscpu  # noqa: E402

import hostsim  # noqa: E402
from matrixbench.report import stats  # noqa: E402

CHANGE = 0.10
# a round's log ratio has log-SD error x sqrt(3) at 3 rounds; Welch's error at 3 vs 3 is a process's log-SD x sqrt(2/3)
DRAWS = {"paired, 3 rounds": math.sqrt(3), "unpaired, 3 vs 3": math.sqrt(1.5)}


def spread_for_power(df, power=0.5):
    """The standard error of the log ratio (at ``df`` degrees of freedom) that gives ``power`` at +10%."""
    critical = scipy_stats.t.ppf(0.975, df)

    def gap(error):
        return scipy_stats.nct.sf(critical, df, math.log(1 + CHANGE) / error) - power
    return optimize.brentq(gap, 1e-4, 1.0)


def split(host, evidence=hostsim.EVIDENCE):
    """(per-process log-SD beyond the host's own noise, shared log-SD) read from the records' launch-bound cells
    with repeats 0 and 1 (see the module's doc), and the pairs it rests on."""
    records = {}
    for path in sorted((evidence / "run-acc" / "acc" / "latest").glob("*.json")):
        record = json.loads(path.read_text())
        mode = record["cell"]["mode"] if "cell" in record else path.name.split("_")[2]
        if mode not in ("eager", "default"):
            continue
        model = path.name.split("_bs")[0]
        records.setdefault(model, {}).setdefault(mode, {})[record.get("repeat", 0)] = record["timing"]["mean_ms"]
    ratios = {model: [math.log(by[1] / by[0]) for by in modes.values() if 0 in by and 1 in by]
              for model, modes in records.items()}
    differences = [a - b for found in ratios.values() for i, a in enumerate(found) for b in found[i + 1:]]
    unshared = math.sqrt(float(np.mean(np.square(differences))) / 4) if differences else float("nan")
    processes = hostsim.evidence_processes(evidence)
    seen = hostsim.fit_measures(hostsim.simulated_processes(replace(host, residual_sd=0.0),
                                                            hostsim.shape_of(processes), 20,
                                                            np.random.default_rng(5)))["between_sd"]
    per_process = math.sqrt(max(0.0, unshared ** 2 - seen ** 2))
    shared = math.sqrt(max(0.0, host.residual_sd ** 2 - per_process ** 2))
    return per_process, shared, {"ratios": ratios, "differences": differences, "unshared": unshared,
                                 "host_alone": seen}


H200 = ROOT / "benchmarks" / "results" / "gpu" / "NVIDIA-H200-20261126-after" / "acceptance" / "latest"


def eager_levels(folder=H200):
    """How far apart eager levels of one model are, read from a run's records two ways: the eager processes'
    own loops (timing.mean_ms of the eager records), and the eager blocks that every compiled process times in
    turn with its compiled blocks after its own loop (timing.paired: the mean of its eager block means), one
    level per process. Per model {"own": [...], "blocks": [...]} (ms) and the pooled log-SD of each
    (within-model deviations, n - 1 df per model)."""
    found = {}
    for path in sorted(folder.glob("*.json")):
        record = json.loads(path.read_text())
        if record.get("status") != "ok" or "cell" not in record:
            continue
        cell, timing = record["cell"], record.get("timing") or {}
        levels = found.setdefault(cell["model"], {"own": [], "blocks": []})
        if cell["mode"] == "eager":
            levels["own"].append(timing["mean_ms"])
        elif timing.get("paired"):
            levels["blocks"].append(float(np.mean([pair["eager_ms"] for pair in timing["paired"]["pairs"]])))

    def pooled(key):
        squares = df = 0
        for levels in found.values():
            logs = np.log(levels[key])
            squares += float(np.sum((logs - logs.mean()) ** 2))
            df += len(logs) - 1
        return math.sqrt(squares / df) if df else float("nan")
    return found, {"own": pooled("own"), "blocks": pooled("blocks")}


def measure(host, shared_sd, calls, trials, rng):
    found = {}
    for change in (0.0, CHANGE):
        base, cand = hostsim.run_rounds(rng, trials, 3, host=host, calls=calls, change=change, state_sd=shared_sd)
        paired = stats.judge_by_round_many(np.log(cand) - np.log(base), margin_pct=3.0)
        unpaired = stats.judge_many(base, cand, margin_pct=3.0)
        for name, judged in (("paired", paired), ("unpaired", unpaired)):
            key = "stars_0" if change == 0 else "power_10"
            hits = np.isin(judged.verdict, stats.STARRED) if change == 0 else judged.verdict == stats.SLOWER
            found.setdefault(name, {})[key] = float(np.mean(hits))
    return found


def measure_turns(host, trials, rng, blocks=10, block_calls=30):
    """The same image change measured in turns (two processes alive at once, blocks alternating: runner.baton):
    3 rounds, each round's log ratio the median over its block pairs, judged by round. A state the round shares
    is on both sides of every pair and cancels, so only the per-process level and the host's noise within the
    blocks are left."""
    found = {}
    for change in (0.0, CHANGE):
        logs = hostsim.turn_rounds(rng, trials, 3, host, change=change, blocks=blocks, block_calls=block_calls)
        judged = stats.judge_by_round_many(logs, margin_pct=3.0)
        hits = np.isin(judged.verdict, stats.STARRED) if change == 0 else judged.verdict == stats.SLOWER
        found["stars_0" if change == 0 else "power_10"] = float(np.mean(hits))
    return found


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=1000)
    parser.add_argument("--calls", default="300,1000,3000")
    parser.add_argument("--turn-trials", type=int, default=4000, help="comparisons a model in the turns table")
    parser.add_argument("--seed", type=int, default=37)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "image_power")
    args = parser.parse_args(argv)
    started = time.time()
    host, _ = hostsim.fit()
    per_process, shared, evidence = split(host)
    needed = {"paired, 3 rounds": spread_for_power(2), "unpaired, 3 vs 3": spread_for_power(4)}
    rng = np.random.default_rng(args.seed)
    models = {"fitted host (per-process level)": (host, 0.0),
              "split by the records (round-shared + per-process)": (replace(host, residual_sd=per_process), shared)}
    rows = []
    for name, (model, state) in models.items():
        for calls in (int(value) for value in args.calls.split(",")):
            found = measure(model, state, calls, args.trials, rng)
            rows.append({"model": name, "calls": calls, "loop_s": calls * 4.0 / 1000, **found})
            print(rows[-1], flush=True)
    h200, h200_sd = eager_levels()
    turn_models = dict(models)
    bounded = replace(host, residual_sd=h200_sd["blocks"])
    turn_models["per-process level as the H200's eager blocks bound it"] = (bounded, 0.0)
    turns = []
    for name, (model, _) in turn_models.items():
        turns.append({"model": name, "blocks": 10, "block_calls": 30, "trials": args.turn_trials,
                      **measure_turns(model, args.turn_trials, rng)})
        print(turns[-1], flush=True)
    seconds = time.time() - started
    result = {"seed": args.seed, "trials": args.trials, "machine": lscpu(), "contention": contention(),
              "load_average": [round(v, 2) for v in os.getloadavg()], "seconds": seconds,
              "residual_sd": host.residual_sd,
              "split": {"per_process_sd": per_process, "shared_sd": shared, **evidence},
              "needed_error": needed, "rows": rows, "turns": turns,
              "h200_eager_levels": {"by_model": h200, "pooled_log_sd": h200_sd}}
    args.out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    lines = ["# Image-change power at +10%, a launch-bound cell, 3 processes (issue 34)", "",
             f"`benchmarks/bench_image_power.py`, seed {args.seed}; {describe(result['machine'])} Load average "
             f"{result['load_average']}; {describe_contention(result['contention'])}; {seconds:.0f} s.", "",
             "50% power at +10% needs a standard error of the log ratio of at most: "
             + "; ".join(f"{key} {value:.4f} (a draw's log-SD {value * DRAWS[key]:.3f})"
                         for key, value in needed.items()) + ".", "",
             f"The fitted host's per-process level: log-SD {host.residual_sd:.3f}. The records' launch-bound cells, "
             f"log ratio round 1 / round 0: {evidence['ratios']}; their unshared part {evidence['unshared']:.3f} (the "
             f"host's own noise alone {evidence['host_alone']:.3f}) -> per-process {per_process:.3f}, shared by the "
             f"round {shared:.3f}.", "",
             f"{args.trials} comparisons a cell; 4 ms calls; margin 3%. paired by round / unpaired.", "",
             "| model | calls a process | loop s | starred at 0 | starred at +10% |", "|---|---|---|---|---|"]
    for row in rows:
        p, u = row["paired"], row["unpaired"]
        lines.append(f"| {row['model']} | {row['calls']} | {row['loop_s']:.1f} | "
                     f"{p['stars_0']:.1%} / {u['stars_0']:.1%} | {p['power_10']:.1%} / {u['power_10']:.1%} |")
    lines += ["", "In turns (two processes of a round alive at once, 10 blocks of 30 calls a side alternating, "
              "runner.baton; each round's log ratio the median over its block pairs; judged by round, 3 rounds; "
              f"the shared state cancels in every pair; {args.turn_trials} comparisons a model):", "",
              "| model | starred at 0 | starred at +10% |", "|---|---|---|"]
    for row in turns:
        lines.append(f"| {row['model']} | {row['stars_0']:.1%} | {row['power_10']:.1%} |")
    lines += ["", f"The H200's records ({H200.relative_to(ROOT)}): eager levels of one model, ms, the eager processes' "
              "own loops against the eager blocks each compiled process timed in turn with its compiled blocks "
              "(one level a process): "
              + "; ".join(f"{model} own {[round(v, 2) for v in lv['own']]}, "
                          f"blocks {[round(v, 2) for v in lv['blocks']]}" for model, lv in h200.items())
              + f". Pooled log-SD: own loops {h200_sd['own']:.3f}, eager blocks {h200_sd['blocks']:.3f} (an upper "
              "bound on a per-process level there: the blocks' host noise is in it)."]
    text = "\n".join(lines) + "\n"
    args.out.with_suffix(".md").write_text(text, encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
