"""False stars of Welch's t alone and of the report's Hsu df, at small unequal sides (docs/verdicts.md).

The cases and seeds of tests/test_verdicts_level.py ``test_small_unequal_sides_hold_the_level``: no change, two
sides of (baseline, candidate) processes whose log means are normal with SD 0.05 x spread, 20,000 comparisons a
case. "Welch alone": the two-sided 95% Welch-Satterthwaite interval on the log means (scipy's ttest_ind,
equal_var=False) excludes no change. "Report": stats.judge_many starred it (faster or slower), with Welch's df
less stats.WELCH_DF_LESS and Hsu's n_small - 1 df where the smaller side has fewer than stats.HSU_BELOW processes.
Writes ``results/small_sides.json`` and ``.md``; about 5 s.
"""
import os
import sys
import time
from pathlib import Path

import numpy as np
from scipy import stats as scipy_stats

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.machine import write_results  # noqa: E402
from matrixbench.report import stats  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
SIZES = [(2, 5), (2, 10), (3, 10), (4, 10), (3, 4)]
SPREADS = [(1.0, 1.0), (1.0, 0.3)]
TRIALS = 20000


def case(sizes, spreads):
    rng = np.random.default_rng(sum(sizes) * 10 + int(spreads[1] * 10))   # the test's seed
    sides = [np.exp(0.05 * spread * rng.standard_normal((TRIALS, count))) for count, spread in zip(sizes, spreads)]
    welch = scipy_stats.ttest_ind(np.log(sides[1]), np.log(sides[0]), axis=1, equal_var=False).pvalue < 0.05
    judged = stats.judge_many(*sides, margin_pct=3.0)
    report = np.isin(judged.verdict, stats.STARRED)
    return {"sizes": list(sizes), "spreads": list(spreads), "trials": TRIALS,
            "welch_alone": float(np.mean(welch)), "report_hsu": float(np.mean(report))}


def markdown(result):
    lines = ["# False stars at small unequal sides: Welch's t alone against the report's df", "",
             "`benchmarks/bench_small_sides.py`: the cases and seeds of tests/test_verdicts_level.py "
             "`test_small_unequal_sides_hold_the_level`, no change, 20,000 comparisons a case (standard error "
             "about 0.15 points at 5%).", "",
             "| processes (baseline, candidate) | SD ratio | Welch alone | report (its df: Welch's less one, Hsu's) |",
             "| --- | --- | ---: | ---: |"]
    for row in result["cases"]:
        lines.append(f"| {row['sizes'][0]} against {row['sizes'][1]} | {row['spreads'][0] / row['spreads'][1]:.1f}x | "
                     f"{row['welch_alone']:.1%} | {row['report_hsu']:.1%} |")
    machine = result["machine"]
    lines += ["", f"Machine (lscpu): {'; '.join(f'{k}: {v}' for k, v in machine.items())}.",
              f"Load average {result['load_average']}; {result['seconds']:.0f} s.", ""]
    return "\n".join(lines)


def main():
    started, load = time.monotonic(), os.getloadavg()
    result = {"cases": [case(sizes, spreads) for sizes in SIZES for spreads in SPREADS]}
    write_results(RESULTS, "small_sides", result, markdown, load=load, started=started)


if __name__ == "__main__":
    main()
