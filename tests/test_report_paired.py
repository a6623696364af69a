"""Paired speed-ups in the report (issue 32 item 2, issue 34 item 3), on the real H200 records of this
stop's acceptance run (benchmarks/results/gpu/NVIDIA-H200-20261126-after: 2 processes a cell, ResNet-50 and
ViT at batch 1, eager / default / reduce-overhead; the host moved the eager processes by 31-47%)."""
import copy
import json
import math
import shutil
from pathlib import Path

import pytest

from matrixbench.report import records
from matrixbench.report.cells import CellIndex, process_pairs
from matrixbench.report.comparisons import comparisons as derive
from matrixbench.report.document import assemble
from matrixbench.report.published import load_published

ROOT = Path(__file__).resolve().parents[1]
H200 = ROOT / "benchmarks" / "results" / "gpu" / "NVIDIA-H200-20261126-after" / "acceptance"


def derived_rows(run_path):
    cells = CellIndex(records.load_results([run_path]), ["latest"])
    return cells, derive(cells, load_published(), {"latest": "none"})


def by_kind(rows, kind):
    return {(row["model"], row["mode"]): row for row in rows if row["kind"] == kind}


def test_on_the_h200_records_the_paired_interval_is_narrow_where_the_unpaired_one_is_not():
    _, rows = derived_rows(H200)
    paired, unpaired = by_kind(rows, "paired_speedup"), by_kind(rows, "speedup")
    assert set(paired) == set(unpaired) == {(m, mode) for m in ("resnet", "vit")
                                           for mode in ("default", "reduce-overhead")}
    for key, row in paired.items():
        width = math.log(row["ratio_high"] / row["ratio_low"])
        other = unpaired[key]
        assert row["processes"] == 2 and row["verdict"] == "faster"
        # the eager processes moved by a third to a half: the unpaired interval spans more than 10x
        assert other["verdict"] == "undecided" and math.log(other["ratio_high"] / other["ratio_low"]) > 5 * width
        # each process's own blocks: the interval holds every process's median block ratio
        paths = sorted(H200.glob(f"latest/{key[0]}_bs1_{key[1]}_*.json"))
        for record in (json.loads(path.read_text()) for path in paths):
            assert row["ratio_low"] <= record["timing"]["paired"]["speedup_median"] <= row["ratio_high"]


def test_the_report_shows_the_paired_table_and_counts_it_apart(tmp_path):
    cells, rows = derived_rows(H200)
    report = assemble(cells, load_published(), [], charts=[])
    section = next(s for s in report.sections if s.title == "Speed-ups paired in one process")
    assert section.shown and len(section.tables[0].rows) == 4
    kinds = [row[1].text for row in report.verdicts.rows]
    assert "compiled against eager, paired in one process" in kinds
    # the multiplicity line counts hypotheses: the 4 speed-ups and 2 mode changes, not the paired views
    assert report.verdict_lines[0].startswith("2 of 6 tested comparisons are starred")


def test_the_paired_section_heads_its_table_once_in_markdown_and_html():
    """The section's title is the table's: one heading, not "## X" then "### X"."""
    from matrixbench.report.render import render_html, render_markdown

    cells, _ = derived_rows(H200)
    report = assemble(cells, load_published(), [], charts=[])
    markdown, html = render_markdown(report), render_html(report)
    assert markdown.count("Speed-ups paired in one process") == 1 and "## Speed-ups paired in one process" in markdown
    assert html.count("Speed-ups paired in one process") == 1 and "<h2>Speed-ups paired in one process</h2>" in html
    assert "<h3></h3>" not in html and "\n### \n" not in markdown


def test_records_without_pairs_or_with_bad_pairs_give_no_paired_row(tmp_path):
    run = tmp_path / "acceptance"
    shutil.copytree(H200, run)
    for path in (run / "latest").glob("resnet_*.json"):
        data = json.loads(path.read_text())
        if data["timing"].get("paired"):
            data["timing"]["paired"] = None        # as --no-paired writes it
        path.write_text(json.dumps(data))
    _, rows = derived_rows(run)
    assert {model for model, _ in by_kind(rows, "paired_speedup")} == {"vit"}
    good = {"timing.paired.pairs": [{"eager_ms": 4.0, "compiled_ms": 3.0}]}
    assert process_pairs(good) == [(4.0, 3.0)]
    for bad in (float("nan"), -1.0, 0.0, "3", True, None):
        broken = copy.deepcopy(good)
        broken["timing.paired.pairs"][0]["compiled_ms"] = bad
        assert process_pairs(broken) == []
    assert process_pairs({"timing.paired.pairs": float("nan")}) == []   # pandas' missing value
    assert process_pairs({"timing.paired.pairs": ["x"]}) == []


@pytest.mark.parametrize("model", ["resnet", "vit"])
def test_one_process_with_pairs_is_shown_not_tested(tmp_path, model):
    run = tmp_path / "acceptance"
    shutil.copytree(H200, run)
    for path in (run / "latest").glob(f"{model}_*.r1.json"):
        path.unlink()
    _, rows = derived_rows(run)
    for (row_model, _), row in by_kind(rows, "paired_speedup").items():
        if row_model == model:
            assert row["verdict"] == "not tested" and row["ratio_low"] is None and row["processes"] == 1
