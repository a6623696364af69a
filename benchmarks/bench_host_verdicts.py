"""Verdicts under the host simulator fitted to the H100 evidence (issue 34); results/host_verdicts.{json,md}.

1. the fit: each host measure on the evidence's samples_ms beside the same measure on the simulator;
2. the per-process estimate (mean, median, trimmed, block_median): false stars at no change and power
   at a true +10% image change of a launch-bound cell (4 ms calls), 3 processes a side, by loop length;
3. paired speed-ups (stats.judge_paired, eager/compiled blocks of 25 calls in one process) against
   today's unpaired judgement (compiled process means against eager ones, Welch): a true 10% speed-up
   and none, 3 processes; and a speed-up's change of 10% between two images;
4. the stopping rule of repeats auto (adaptive.goes_on): "final" (decide at the end), "spending", and
   the old rule (stop at the first decided verdict, futility as ``promising``) against fixed repeats,
   on process means from the lognormal model (1-10% CV) and from the fitted host (300 calls).
Every rate is a share of simulated comparisons of known truth; no record, no torch.
"""
import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from machine import describe, write_results  # noqa: E402

import hostsim  # noqa: E402
from matrixbench.executors import adaptive  # noqa: E402
from matrixbench.report import stats  # noqa: E402

MARGIN = 3.0
POLICIES = (("fixed 3", "old", 3, 3), ("fixed 5", "old", 5, 5), ("fixed 10", "old", 10, 10),
            ("auto old (stop at first verdict)", "old", 3, 10), ("auto final", adaptive.FINAL, 3, 10),
            ("auto spending", adaptive.SPENDING, 3, 10))
STARS = ("faster", "slower")


def judge_rows(baseline, candidate):
    return stats.judge_many(np.asarray(baseline), np.asarray(candidate), margin_pct=MARGIN)


def estimators(host, trials, calls, rng, processes=3, base=4.0):
    """Per estimate: (false-star rate at no change, power at +10%, log-SD of one process's estimate)."""
    found = {}
    draws = {change: [[[host.process(rng, base * (1 + change if side else 1.0), calls) for _ in range(processes)]
                       for side in (0, 1)] for _ in range(trials)] for change in (0.0, 0.10)}
    for how in stats.PROCESS_ESTIMATES:
        row = {}
        for change, sets in draws.items():
            values = np.asarray([[[stats.process_estimate(p, how) for p in side] for side in pair] for pair in sets])
            judged = judge_rows(values[:, 0], values[:, 1])
            row["false_star" if change == 0 else "power_10"] = float(
                np.mean(np.isin(judged.verdict, STARS) if change == 0 else judged.verdict == "slower"))
            if change == 0:
                row["process_log_sd"] = float(np.std(np.log(values[:, 0]), ddof=1))
        found[how] = row
    return found


def paired(host, trials, rng, processes=3, calls=300, block=25, eager=4.0):
    """Paired against today's unpaired judgement of a speed-up (eager / compiled)."""
    rows = {}
    for speedup in (1.0, 1.10):
        compiled = eager / speedup
        hits = {"paired": 0, "today": 0}
        false = {"paired": 0, "today": 0}
        for _ in range(trials):
            sets = [host.paired_blocks(rng, eager, compiled, calls, block) for _ in range(processes)]
            mine = stats.judge_paired(sets, margin_pct=MARGIN)
            eager_means = [host.process(rng, eager, calls).mean() for _ in range(processes)]
            compiled_means = [host.process(rng, compiled, calls).mean() for _ in range(processes)]
            today = stats.judge(eager_means, compiled_means, margin_pct=MARGIN)
            for name, verdict in (("paired", mine.verdict), ("today", today.verdict)):
                hits[name] += verdict == "faster"
                false[name] += verdict in STARS
        if speedup == 1.0:
            rows["false_star_at_1.00"] = {name: count / trials for name, count in false.items()}
        else:
            rows["decided_faster_at_1.10"] = {name: count / trials for name, count in hits.items()}
    # a speed-up's change of 10% between images (1.2 -> 1.32), judged on paired draws
    for change in (0.0, 0.10):
        hits = 0
        for _ in range(trials):
            sides = [[host.paired_blocks(rng, eager, eager / (1.2 * (1 + change * side)), calls, block)
                      for _ in range(processes)] for side in (0, 1)]
            verdict = stats.judge_paired_change(*sides, margin_pct=MARGIN).verdict
            hits += verdict in STARS if change == 0 else verdict == "slower"
        rows["change_false_star" if change == 0 else "change_power_10"] = hits / trials
    return rows


def stopping(means, policy, rule):
    """One balanced comparison's waves: (final processes a side, the report's judgement at the end)."""
    baseline, candidate = means
    count = policy.minimum
    while True:
        judged = stats.judge(baseline[:count], candidate[:count], margin_pct=policy.margin_pct)
        if count >= policy.maximum:
            break
        if rule == "old":
            spread = adaptive.Spread(float(np.sqrt((np.var(np.log(baseline[:count]), ddof=1)
                                                     + np.var(np.log(candidate[:count]), ddof=1)) / 2)))
            go = not judged.decided and adaptive.promising(judged, policy, spread)
        else:
            go = adaptive.goes_on(judged, policy, count, rule)
            if go and rule == adaptive.SPENDING:
                spread = adaptive.Spread(float(np.sqrt((np.var(np.log(baseline[:count]), ddof=1)
                                                         + np.var(np.log(candidate[:count]), ddof=1)) / 2)))
                go = adaptive.promising(judged, policy, spread)
        if not go:
            break
        count += 1
    return count, judged


def stopping_rules(model, trials, rng):
    """False stars and coverage at no change, power at +-10%, processes a side; per rule."""
    rows = {}
    for change in (0.0, 0.10, -0.10):
        sets = []
        for _ in range(trials):
            sets.append(model(rng, 10, change))
        for name, rule, low, high in POLICIES:
            pol = adaptive.Policy(low, high, MARGIN)
            used, stars, right, covered = 0, 0, 0, 0
            for pair in sets:
                count, judged = stopping(pair, pol, rule)
                used += count
                stars += judged.verdict in STARS
                right += judged.verdict == ("slower" if change > 0 else "faster")
                truth = 1.0 + change
                covered += judged.low is not None and judged.low <= truth <= judged.high
            row = rows.setdefault(name, {})
            key = f"{change:+.0%}"
            row[key] = {"processes": used / trials, "stars": stars / trials, "decided_right": right / trials,
                        "coverage": covered / trials}
    return rows


def lognormal_model(rng, count, change):
    cv = rng.uniform(0.01, 0.10)
    return [10.0 * np.exp(rng.normal(0, cv, count)) * (1 + change * side) for side in (0, 1)]


def host_model(host, calls):
    def draw(rng, count, change):
        return [np.asarray([host.process(rng, 4.0 * (1 + change * side), calls).mean() for _ in range(count)])
                for side in (0, 1)]
    return draw


def markdown(result):
    fit = result["fit"]
    lines = ["# Verdicts under the fitted host simulator (issue 34)", "",
             "## 1. The host fitted to the H100 records (tests/hostsim.py `fit`)", "",
             "| measure | evidence | simulator (fitted, evidence's shape x20) |", "| --- | --- | --- |"]
    lines += [f"| {name} | {pair[0]:.3f} | {pair[1]:.3f} |" for name, pair in fit["check"].items()]
    lines += ["", "Fitted: " + ", ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}"
                                         for k, v in fit["host"].items()), "",
              "## 2. Per-process estimate: 4 ms launch-bound cell, 3 processes a side, image change", "",
              "| model | calls | estimate | false stars at 0 | power at +10% | log-SD of one process |",
              "| --- | --- | --- | --- | --- | --- |"]
    for model, by_calls in result["estimators"].items():
        for calls, rows in by_calls.items():
            for how, row in rows.items():
                lines.append(f"| {model} | {calls} | {how} | {row['false_star']:.1%} | {row['power_10']:.1%} | "
                             f"{row['process_log_sd']:.3f} |")
    lines += ["", "## 3. Paired speed-ups (3 processes, 300 calls a side each, blocks of 25)", "",
              "| model | false stars at speed-up 1.00 (paired / today) | decided faster at 1.10 (paired / today) | "
              "speed-up change 0: false stars | speed-up change +10%: decided |", "| --- | --- | --- | --- | --- |"]
    for model, row in result["paired"].items():
        lines.append(f"| {model} | {row['false_star_at_1.00']['paired']:.1%} / {row['false_star_at_1.00']['today']:.1%}"
                     f" | {row['decided_faster_at_1.10']['paired']:.1%} / {row['decided_faster_at_1.10']['today']:.1%}"
                     f" | {row['change_false_star']:.1%} | {row['change_power_10']:.1%} |")
    lines += ["", "## 4. Stopping rules (repeats auto 3-10 against fixed repeats), margin 3%", "",
              "| model | policy | false stars at 0 | coverage at 0 | decided at +-10% | processes a side at 0 / 10% |",
              "| --- | --- | --- | --- | --- | --- |"]
    for model, rows in result["stopping"].items():
        for name, row in rows.items():
            power = (row["+10%"]["decided_right"] + row["-10%"]["decided_right"]) / 2
            lines.append(f"| {model} | {name} | {row['+0%']['stars']:.1%} | {row['+0%']['coverage']:.1%} | "
                         f"{power:.1%} | {row['+0%']['processes']:.2f} / {row['+10%']['processes']:.2f} |")
    lines += ["", describe(result["machine"]),
              f"Load average {result['load_average']}; contention {result['contention']}; trials {result['trials']}; "
              f"{result['seconds']:.0f} s."]
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=34)
    parser.add_argument("--calls", default="300,1000,3000")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = parser.parse_args(argv)
    started, load = time.monotonic(), list(os.getloadavg())
    rng = np.random.default_rng(args.seed)
    host, _ = hostsim.fit()
    result = {"trials": args.trials,
              "fit": {"host": {k: v for k, v in host.__dict__.items()},
                      "check": {k: list(v) for k, v in hostsim.check_fit(host).items()}}}
    small = max(200, args.trials // 2)
    result["estimators"] = {"fitted host": {str(calls): estimators(host, small, int(calls), rng)
                                            for calls in args.calls.split(",")}}
    result["paired"] = {"fitted host": paired(host, small, rng)}
    result["stopping"] = {"lognormal 1-10%": stopping_rules(lognormal_model, args.trials, rng),
                          "fitted host, 300 calls": stopping_rules(host_model(host, 300), small, rng)}
    write_results(args.out, "host_verdicts", result, markdown, load=load, started=started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
