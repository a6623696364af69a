"""The noise check's warning threshold, calibrated (issue 32 item 3); results/noise_threshold.{json,md}.

The noise check states the change a comparison of 3 processes a side resolves for launch-bound cells, from its
probe's blocks (matrixbench.host_noise), and warns above host_noise.UNDECIDED_PCT that launch-bound verdicts will
mostly come out undecided. Here, on hosts of known truth, the probe figure at which they do:

1. the host fitted to the H100 records (tests/hostsim.py ``fit``), its noise scaled from quiet to past itself
   (``hostsim.scaled``): per scale the median probe figure (the blocks' CV of a simulated probe of 5.6 s, as
   runner.noise_probe.summarize splits it, then host_noise.resolvable_pct) and the verdicts of a true 10% change
   of a 4 ms launch-bound cell, 3 processes a side of 300 calls (stats.judge_many); the figure where half are undecided
   (``hostsim.undecided_crossing``), with the probe's call at 0.15, 0.3 and 0.6 ms;
2. the bound where processes differ exactly as the probe's blocks do (a lognormal process level of log-SD the
   blocks' CV): the same crossing without the spread between processes that the blocks cannot see.
Every share is one of simulated comparisons of known truth; no record, no torch.
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
from matrixbench import host_noise  # noqa: E402
from matrixbench.report import stats, verdicts  # noqa: E402

SCALES = (0.0, 0.02, 0.04, 0.06, 0.08, 0.1, 0.13, 0.16, 0.2, 0.25, 0.3, 0.4, 0.5, 0.75, 1.0, 1.5)
CALLS_MS = (0.15, 0.3, 0.6)


def lognormal_bound(trials, rng, change=0.10, processes=3):
    """Processes that differ as the probe's blocks do: per block CV, the probe's figure and the undecided share."""
    rows = []
    for cv in (0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.035, 0.04, 0.05, 0.06, 0.08):
        sides = [np.exp(rng.normal(0.0, cv, (trials, processes))) * (1.0 + change * side) for side in (0, 1)]
        judged = stats.judge_many(*sides, margin_pct=verdicts.MARGIN_PCT)
        rows.append({"cv": cv, "probe_pct": host_noise.resolvable_pct(cv, processes),
                     "undecided": float(np.mean(judged.verdict == "undecided")),
                     "starred": float(np.mean(np.isin(judged.verdict, ("faster", "slower"))))})
    return rows


def markdown(result):
    lines = ["# The noise check's warning threshold (issue 32 item 3)", "",
             f"host_noise.UNDECIDED_PCT = {result['threshold']:g}%: the noise check warns that launch-bound verdicts "
             "will mostly come out undecided when its probe says 3 processes a side resolve more than that.", "",
             "## 1. The fitted H100 host, its noise scaled (tests/hostsim.py `scaled`)", "",
             "A true 10% change of a 4 ms launch-bound cell, 3 processes a side of 300 calls, at the report's margin "
             f"({verdicts.MARGIN_PCT:g}%); the probe figure is the median of {result['probes']} probes of 5.6 s "
             "(min-max beside it).", ""]
    for call_ms, sweep in result["sweeps"].items():
        lines += [f"### probe call {call_ms} ms: half undecided at a probe figure of {sweep['crossing']:.1f}%", "",
                  f"| scale | probe figure (median) | min-max | probes above {result['threshold']:g}% (warn) | "
                  "undecided | starred |", "| --- | --- | --- | --- | --- | --- |"]
        lines += [f"| {row['scale']:g} | {row['probe_pct']:.1f}% | {row['probe_pct_low']:.1f}-"
                  f"{row['probe_pct_high']:.1f}% | {row['warned']:.0%} | {row['undecided']:.1%} | "
                  f"{row['starred']:.1%} |"
                  for row in sweep["rows"]]
        lines.append("")
    bound = result["lognormal"]
    lines += ["## 2. The bound: processes that differ only as the probe's blocks do", "",
              f"Half undecided at a probe figure of {bound['crossing']:.1f}%.", "",
              "| blocks' CV | probe figure | undecided | starred |", "| --- | --- | --- | --- |"]
    lines += [f"| {row['cv']:.3f} | {row['probe_pct']:.1f}% | {row['undecided']:.1%} | {row['starred']:.1%} |"
              for row in bound["rows"]]
    lines += ["", describe(result["machine"]),
              f"Load average {result['load_average']}; contention {result['contention']}; trials {result['trials']}; "
              f"{result['seconds']:.0f} s."]
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=2000)
    parser.add_argument("--probes", type=int, default=401)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = parser.parse_args(argv)
    started, load = time.monotonic(), list(os.getloadavg())
    host, _ = hostsim.fit(hostsim.REPO_EVIDENCE)
    result = {"trials": args.trials, "probes": args.probes, "threshold": host_noise.UNDECIDED_PCT,
              "host": dict(host.__dict__), "sweeps": {}}
    for call_ms in CALLS_MS:
        rows = hostsim.threshold_sweep(host, SCALES, probes=args.probes, trials=args.trials, probe_call_ms=call_ms)
        result["sweeps"][str(call_ms)] = {"rows": rows, "crossing": hostsim.undecided_crossing(rows)}
    bound = lognormal_bound(args.trials * 4, np.random.default_rng(33))
    result["lognormal"] = {"rows": bound, "crossing": hostsim.undecided_crossing(bound)}
    write_results(args.out, "noise_threshold", result, markdown, load=load, started=started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
