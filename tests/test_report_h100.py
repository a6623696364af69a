"""Issue 30 item 5, on the first real GPU run's records (tests/data/gpu/h100-2026-11-26/run-acc): its
two-process intervals are wide, and the old "% faster than eager" axis stretched to the widest (7000%),
flattening every bar. Now: ratios on a log axis, the frame set by the bars, an interval past it ends in
an arrow at the edge; the summary's front table has what a reader needs first; the report says TF32 was off."""
import json
import math
import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from host_helpers import report_with_figures
from matrixbench.report import charts, cost_charts, cost_tables, tables, verdicts
from matrixbench.report.tables import FLAGS, SUMMARY_FRONT

MARK_NAMES = ("noisy within a process", "noisy between processes", "accuracy check failed", "per-call latency", *FLAGS)

EVIDENCE = Path(__file__).parent / "data" / "gpu" / "h100-2026-11-26"
SPEEDUP = "nvidia-h100-80gb-hbm3_bs1_speedup.png"


@pytest.fixture(scope="module")
def h100_out(tmp_path_factory):
    """(the report folder, {chart file name: Figure}) of the H100 run."""
    root = tmp_path_factory.mktemp("h100")
    run = Path(shutil.copytree(EVIDENCE / "run-acc", root / "run-acc"))
    figures = report_with_figures([run], root / "out")
    return root / "out", figures


@pytest.fixture(scope="module")
def h100(h100_out):
    """(report.md, comparisons.csv as a frame, {chart file name: Figure}) of the H100 run."""
    out, figures = h100_out
    return (out / "report.md").read_text(encoding="utf-8"), pd.read_csv(out / "comparisons.csv"), figures


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


def _records():
    return [json.loads(path.read_text()) for path in (EVIDENCE / "run-acc" / "acc" / "latest").glob("*.json")]


def test_every_mark_of_the_latency_chart_lies_inside_its_axes(h100):
    """DETR eager is the longest bar and per-call (two host syncs per call in its records): its third mark, ↕,
    was drawn past the frame matplotlib's default margin left and clipped, though the legend named it."""
    axes = h100[2]["nvidia-h100-80gb-hbm3_bs1_duration.png"].axes[0]
    per_call_cells = {record["cell_id"] for record in _records()
                      if record["status"] == "ok" and record["timing"]["host_syncs_per_call"] > 0}
    assert per_call_cells == {"detr-resnet-101_bs1_eager_float32"}
    marks = [found for found in axes.collections if found.get_label() in (*MARK_NAMES, "_nolegend_")]
    [per_call] = [found for found in marks if found.get_label() == "per-call latency"]
    assert len(per_call.get_offsets()) == len(per_call_cells)
    box = axes.get_window_extent()
    radius = (charts.MARK_SIZE ** 0.5) / 2 * axes.figure.dpi / 72
    placed = [x for found in marks for x, _ in found.get_offset_transform().transform(found.get_offsets())]
    assert len(placed) >= 7   # † ¶ on ResNet eager and RO and DETR eager and default, † on ResNet default, ↕
    assert all(box.x0 + radius <= x <= box.x1 - radius for x in placed)


def _section(markdown, heading):
    return markdown.split(f"## {heading}")[1].split("\n## ")[0]


@pytest.mark.parametrize("heading, kind, row, column", [
    ("Latency per device and batch size", "speedup", "Image Classification/ResNet", 2),
    ("Compile modes against default", "mode_change", "Image Classification/ResNet", 3)])
def test_an_untested_change_is_shown_as_the_legend_says(h100, heading, kind, row, column):
    """ResNet default ran in one process (the run was stopped before its second): its speed-up and the
    reduce-overhead change against it are not tested. The legends said such a change is "marked" with the
    not-tested text, which these tables never show: the change appears with no mark at all."""
    markdown, comparisons, _ = h100
    processes = {}
    for record in _records():
        processes[record["cell_id"]] = processes.get(record["cell_id"], 0) + 1
    assert processes["resnet_bs1_default_float32"] == 1
    untested = comparisons.query(f"kind == '{kind}' and model == 'resnet' and verdict == 'not tested'")
    assert len(untested) == 1
    section = _section(markdown, heading)
    line = next(line for line in section.splitlines() if line.startswith(f"| {row} "))
    shown = line.strip("|").split("|")[column].strip()
    assert f"({untested['percent'].iloc[0]:+.1f}%)" in shown   # no verdict mark after the %
    legend = section.split("\n|")[0]
    claimed = re.findall(r'marked "([^"]+)"', legend)
    assert all(text in section.split("\n|", 1)[1] for text in claimed), f"the legend claims marks {claimed}"
    assert "without a mark" in legend and verdicts.NOT_TESTED_TEXT in legend


def test_the_bracketed_percent_is_named_as_the_arithmetic_names_it(h100):
    """The per-device legend called the bracketed % "the speed-up over eager: eager ms / compiled ms - 1", while
    the summary, the speed-up chart and docs/report.md call the speed-up the ratio (1.70×, 6.84×): a reader took
    +562.5% for a 5.6× speed-up. The bracket is % faster than eager, (eager ms / compiled ms - 1) x 100."""
    markdown, comparisons, _ = h100
    means = {}
    for record in _records():
        means.setdefault(record["cell_id"], []).append(record["timing"]["mean_ms"])
    estimate = {cell: float(np.exp(np.mean(np.log(values)))) for cell, values in means.items()}
    ratio = estimate["resnet_bs1_eager_float32"] / estimate["resnet_bs1_reduce-overhead_float32"]
    section = _section(markdown, "Latency per device and batch size")
    # the % with its verdict's mark, whichever the verdict (* faster, = no change, ? undecided)
    assert re.search(re.escape(f"({(ratio - 1) * 100:+.1f}%") + r"[^)]?\)", section)
    legend = section.split("\n|")[0]
    assert "% faster than eager" in legend
    assert not re.search(r"speed-up over eager: eager ms / compiled ms - 1", legend)


def _bar_colours(figure):
    """{mode: the face colour of its bars} of a bar chart whose legend labels end in the mode."""
    axes = figure.axes[0]
    found = {}
    for container in axes.containers:
        mode = container.get_label().split(" ")[-1]
        found[mode] = tuple(container.patches[0].get_facecolor())
    return found


def test_a_mode_has_one_colour_in_every_chart(h100):
    """The latency and speed-up charts colour by mode (eager blue, default orange, reduce-overhead green); the cost
    charts coloured by series index, so the break-even chart, which has no eager series, drew default in eager's
    blue and reduce-overhead in default's orange."""
    figures = h100[2]
    latency = _bar_colours(figures["nvidia-h100-80gb-hbm3_bs1_duration.png"])
    modes = {record["cell"]["mode"] for record in _records()}
    assert set(latency) == modes and len(set(latency.values())) == len(modes)
    for name in ("speedup", "energy", "break_even"):
        found = _bar_colours(figures[f"nvidia-h100-80gb-hbm3_bs1_{name}.png"])
        assert found and all(found[mode] == latency[mode] for mode in found), name


def test_the_summary_says_what_its_flag_column_counts(h100):
    """Every eager process of the H100 run is noisy (the † ¶ cells of the tables, "flagged" in docs/report.md's
    words), yet the summary's front column "flagged" said 0 for eager, with no legend saying it counts only the
    runner's timing.flags (Ø ∆ ▼ ≠ ...). The column is named for what it counts, and the legend says so."""
    markdown = h100[0]
    records = _records()
    eager = [record for record in records if record["cell"]["mode"] == "eager"]
    assert eager and all(record["timing"]["noisy"] for record in eager)
    assert not any(record["timing"]["flags"] for record in records)
    front = markdown.split("## Summary")[1].split("### Summary, in detail")[0]
    header = next(line for line in front.splitlines() if line.startswith("| Device"))
    columns = [cell.strip() for cell in header.strip("|").split("|")]
    assert "flagged" not in columns and tables.FLAGGED_COLUMN in columns
    eager_row = next(line for line in front.splitlines() if "| eager |" in line)
    assert eager_row.strip("|").split("|")[columns.index(tables.FLAGGED_COLUMN)].strip() == "0"
    legend = front.split("\n|")[0]
    assert f"\"{tables.FLAGGED_COLUMN}\":" in legend and "timing.flags" in legend and "noisy" in legend


def test_costs_csv_break_even_columns_are_numbers_a_never_is_inf(h100_out):
    """DETR's compiled cells have speed-up intervals reaching below 1 (two processes a side, wide), so their
    break-even intervals end in "never": costs.csv wrote the word into a numeric column, which pandas then reads as
    strings ("2721.11" and "never"). A never is now inf, which pandas reads as a float."""
    out, _ = h100_out
    costs = pd.read_csv(out / "costs.csv")
    columns = [column for column in costs.columns if column.startswith("break_even_")]
    assert len(columns) == 6
    for column in columns:
        assert pd.api.types.is_float_dtype(costs[column]), (column, costs[column].tolist())
    markdown = (out / "report.md").read_text(encoding="utf-8")
    section = markdown.split("### Compile break-even")[1].split("\n### ")[0]
    shown = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if len(cells) == 10 and cells[3] in ("default", "reduce-overhead"):
            shown[(cells[0], cells[3])] = cells
    names = {"Image Classification/ResNet": "resnet", "Object Detection/Resnet-101": "detr-resnet-101"}
    assert len(shown) == 4
    for (model, mode), cells in shown.items():
        line = costs[(costs["model"] == names[model]) & (costs["mode"] == mode)].iloc[0]
        high = cells[6].strip("[]").split(cost_tables.INTERVAL_SEPARATOR)[-1] if cells[6].startswith("[") else None
        if high == "never":
            assert line["break_even_cold_high_calls"] == np.inf
        elif high is not None:
            assert math.ceil(line["break_even_cold_high_calls"] - 1e-9) == int(high.replace(",", ""))
        assert math.ceil(line["break_even_cold_calls"] - 1e-9) == int(cells[5].replace(",", ""))
    # a never where the speed-up's interval reaches 1 or below (compiled possibly not faster)
    speedups = pd.read_csv(out / "comparisons.csv").query("kind == 'speedup' and ratio_low == ratio_low")
    reaching = {(row.model, row.mode) for row in speedups.itertuples() if row.ratio_low <= 1.0}
    assert reaching   # DETR's, at least: two processes a side, wide
    nevers = {(row.model, row.mode) for row in costs.itertuples() if row.break_even_cold_high_calls == np.inf}
    assert nevers == reaching


def test_a_break_even_interval_reads_as_two_numbers(h100_out):
    """Break-evens run to thousands of calls, written with a thousands comma; the interval joined its two bounds
    with ", " too: "[1,957, 2,722]" (ResNet reduce-overhead) reads as four numbers. Its bounds are now apart from
    the digits' commas, and each is the CSV's bound rounded up."""
    out, _ = h100_out
    markdown = (out / "report.md").read_text(encoding="utf-8")
    costs = pd.read_csv(out / "costs.csv")
    section = markdown.split("### Compile break-even")[1].split("\n### ")[0]
    line = next(line for line in section.splitlines() if line.startswith("| Image Classification/ResNet")
                and "| reduce-overhead |" in line)
    cells = [cell.strip() for cell in line.strip("|").split("|")]
    resnet = costs[(costs["model"] == "resnet") & (costs["mode"] == "reduce-overhead")].iloc[0]
    assert resnet["break_even_cold_high_calls"] > 1000 and resnet["break_even_warm_high_calls"] > 1000
    for text, cache in ((cells[6], "cold"), (cells[9], "warm")):
        assert not re.search(r"\d, \d", text), text
        low, high = (math.inf if bound == cost_tables.NEVER_TEXT else int(bound.replace(",", ""))
                     for bound in text.strip("[]").split(cost_tables.INTERVAL_SEPARATOR))
        expected = [resnet[f"break_even_{cache}_{end}_calls"] for end in ("low", "high")]
        assert (low, high) == tuple(math.ceil(value) if value != math.inf else value for value in expected)


def test_the_energy_chart_marks_the_uncertain_bars_the_table_marks(h100):
    """Four cells' energy counters were within their error bound (ResNet reduce-overhead's by over 80%): the
    throughput table marks their J/image ~, the energy chart drew them as plain bars."""
    axes = h100[2]["nvidia-h100-80gb-hbm3_bs1_energy.png"].axes[0]
    uncertain = {}
    for record in _records():
        cell = (record["cell"]["model"], record["cell"]["mode"])
        uncertain[cell] = uncertain.get(cell, False) or record["timing"]["energy"]["uncertain"]
    expected = sum(uncertain.values())
    assert expected == 4
    [marks] = [found for found in axes.collections if found.get_label() == cost_charts.UNCERTAIN_LEGEND]
    assert len(marks.get_offsets()) == expected
    box = axes.get_window_extent()
    radius = (charts.MARK_SIZE ** 0.5) / 2 * axes.figure.dpi / 72
    assert all(box.x0 + radius <= x <= box.x1 - radius
               for x, _ in marks.get_offset_transform().transform(marks.get_offsets()))


def test_the_tf32_note_does_not_call_tf32_convolutions_full_precision(h100):
    """Every H100 record kept TF32 off for float32 matmuls but allowed it for cuDNN convolutions, and ResNet and
    DETR's backbone are convolutions: the note said so and then concluded "float32 timings here are full-precision
    ones", which holds only for the matmuls."""
    markdown = h100[0]
    records = _records()
    assert all(record["precision"]["cudnn_allow_tf32"] and not record["precision"]["cuda_matmul_allow_tf32"]
               for record in records)
    [note] = [line for line in markdown.splitlines() if "TF32 was off for float32 matmuls" in line]
    assert "float32 timings here are full-precision ones" not in note
    assert "convolutions could run in TF32" in note and "matmuls ran at full precision" in note


def test_the_environment_shows_cudnn_as_a_version(h100):
    """torch reports cuDNN 9.19.0 as the integer 91900 (cuDNN 9: major x 10000 + minor x 100 + patch; cuDNN 8 and
    before: major x 1000 + minor x 100 + patch), and the environment table printed that integer beside CUDA 13.0."""
    markdown = h100[0]
    [raw] = {record["environment"]["cudnn"] for record in _records()}
    major, rest = (raw // 10000, raw % 10000) if raw >= 90000 else (raw // 1000, raw % 1000)
    section = _section(markdown, "Environment")
    lines = [line for line in section.splitlines() if line.startswith("|")]
    columns = [cell.strip() for cell in lines[0].strip("|").split("|")]
    shown = lines[2].strip("|").split("|")[columns.index("cuDNN")].strip()
    assert shown == f"{major}.{rest // 100}.{rest % 100}" == "9.19.0"
