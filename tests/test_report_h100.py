"""Issue 30 item 5, on the first real GPU run's records (tests/data/gpu/h100-2026-11-26/run-acc): its
two-process intervals are wide, and the old "% faster than eager" axis stretched to the widest (7000%),
flattening every bar. Now: ratios on a log axis, the frame set by the bars, an interval past it ends in
an arrow at the edge; the summary's front table has what a reader needs first; the report says TF32 was off."""
import shutil
from pathlib import Path

import pandas as pd
import pytest

from host_helpers import report_with_figures
from matrixbench.report import charts
from matrixbench.report.tables import SUMMARY_FRONT

EVIDENCE = Path(__file__).parent / "data" / "gpu" / "h100-2026-11-26"
SPEEDUP = "nvidia-h100-80gb-hbm3_bs1_speedup.png"


@pytest.fixture(scope="module")
def h100(tmp_path_factory):
    """(report.md, comparisons.csv as a frame, {chart file name: Figure}) of the H100 run."""
    root = tmp_path_factory.mktemp("h100")
    run = Path(shutil.copytree(EVIDENCE / "run-acc", root / "run-acc"))
    figures = report_with_figures([run], root / "out")
    return ((root / "out" / "report.md").read_text(encoding="utf-8"),
            pd.read_csv(root / "out" / "comparisons.csv"), figures)


def test_the_speedup_frame_is_set_by_the_bars_and_wide_intervals_end_in_arrows(h100):
    _, comparisons, figures = h100
    axes = figures[SPEEDUP].axes[0]
    speedups = comparisons.query("kind == 'speedup'").dropna(subset=["ratio_high"])
    low, high = axes.get_xlim()
    assert axes.get_xscale() == "log"
    assert high <= speedups["estimate_ratio"].max() * charts.RATIO_FRAME * 2 + 1e-9   # the bars set the frame
    past = speedups[(speedups["ratio_high"] > high) | (speedups["ratio_low"] < low)]
    assert len(past) >= 1, "the H100 run has an interval wider than the frame: the case of issue 30"
    arrows = [point for collection in axes.collections if collection.get_gid() == charts.PAST_FRAME
              for point in collection.get_offsets().tolist()]
    ends = sum(int(row.ratio_high > high) + int(row.ratio_low < low) for row in past.itertuples())
    assert len(arrows) == ends
    assert all(x == pytest.approx(high) or x == pytest.approx(low) for x, _ in arrows)
    assert charts.PAST_FRAME in axes.get_legend_handles_labels()[1]


def test_the_summary_puts_what_a_reader_needs_first(h100):
    markdown = h100[0]
    front = markdown.split("## Summary")[1].split("### Summary, in detail")[0]
    header = next(line for line in front.splitlines() if line.startswith("| Device"))
    columns = [cell.strip() for cell in header.strip("|").split("|")]
    assert columns[:4] == list(SUMMARY_FRONT[:4]) and len(columns) <= len(SUMMARY_FRONT)
    assert "ok" not in columns and "cells ran" in columns
    details = markdown.split("### Summary, in detail")[1]
    assert next(line for line in details.splitlines() if line.startswith("| Device")).startswith(
        "| Device | Image | Mode | ok |")


def test_the_report_says_tf32_was_off_and_lists_no_selftest_json_as_a_record(h100):
    markdown = h100[0]
    assert markdown.count("TF32 was off for float32 matmuls") == 1
    assert "Left out, not a readable record" not in markdown
