"""What the tables show, including partial data: one image, one mode, failed cells."""
import json
import re
import shutil
from pathlib import Path

import pytest

from matrixbench.report import build_report, records
from matrixbench.report.cells import STATUS_TEXT, CellIndex
from matrixbench.report.document import assemble
from matrixbench.report.published import load_published
from matrixbench.report.tables import ACCURACY_MARK, NOISY_MARK, SIGNIFICANT_MARK

FIXTURES = Path(__file__).parent / "fixtures"


def _report(folders, sources=None):
    frame = records.load_results(folders)
    manifests = records.read_manifests(folders)
    return assemble(CellIndex(frame, records.image_order(manifests)), load_published(), records.run_notes(manifests),
                    charts=[], sources=sources)


def _subset(tmp_path, keep, run="gpu-run"):
    """A copy of a fixture run with only the records for which keep(record) is true."""
    for path in (FIXTURES / run).rglob("*.json"):
        if path.name == "run.json" or keep(json.loads(path.read_text())):
            target = tmp_path / run / path.relative_to(FIXTURES / run)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(path, target)
    return tmp_path / run


def _all_tables(report):
    return [report.summary, report.environment, *report.per_device, *report.image_pairs,
            *report.compile_modes, *report.published]


def _assert_well_formed(report):
    for table in _all_tables(report):
        assert table.rows, table.title
        for row in table.rows:
            assert len(row) == len(table.header), table.title
            assert all(cell.text.strip() for cell in row), table.title
        for column, name in enumerate(table.header):
            assert any(row[column].kind != "missing" for row in table.rows), f"{table.title}: empty column {name}"


def _cell(table, first_column, header):
    row = next(row for row in table.rows if row[0].text == first_column)
    return row[table.header.index(header)]


def test_full_fixture_tables_are_well_formed():
    report = _report([FIXTURES / run for run in ("gpu-run", "cpu-run", "cpu-docker-run")])
    _assert_well_formed(report)
    assert report.image_pairs and report.compile_modes and report.published


def test_failed_cells_show_status_and_a_footnote_with_the_reason():
    report = _report([FIXTURES / "gpu-run"])
    failed = [cell for table in report.per_device for row in table.rows for cell in row if cell.kind == "failed"]
    assert sorted(cell.text for cell in failed) == sorted([*STATUS_TEXT.values(), "OOM"])
    assert all(cell.footnote for cell in failed)
    assert "CUDA out of memory" in report.footnotes[next(c.footnote for c in failed if c.text == "OOM") - 1]
    assert len(report.footnotes) == len(failed)


def test_noisy_and_inaccurate_cells_are_flagged():
    report = _report([FIXTURES / "gpu-run"])
    nightly_bs1 = next(t for t in report.per_device if t.title.endswith("batch size 1 · nightly (torch 2.1.0)"))
    assert NOISY_MARK in _cell(nightly_bs1, "Image Classification/ResNet", "eager").marks
    assert ACCURACY_MARK in _cell(nightly_bs1, "Object Detection/Resnet-101", "default").marks
    assert not _cell(nightly_bs1, "Image Classification/ViT", "eager").marks


def test_speedup_against_eager_is_in_brackets():
    report = _report([FIXTURES / "gpu-run"])
    table = report.per_device[0]
    eager = float(_cell(table, "Image Classification/ViT", "eager").text)
    default_text = _cell(table, "Image Classification/ViT", "default").text
    default, percent = re.fullmatch(r"([\d.]+) \(([+-][\d.]+)%\)", default_text).groups()
    assert float(percent) == pytest.approx((eager / float(default) - 1) * 100, abs=0.06)


def test_one_process_per_cell_shows_changes_but_tests_none():
    report = _report([FIXTURES / "gpu-run"])
    pairs = report.image_pairs[0]
    by_mode = {row[1].text: row for row in pairs.rows if row[0].text == "Image Classification/ViT"}
    assert by_mode["default"][4].text == "-10.0%"       # nightly 10% faster, but one process per cell
    assert by_mode["default"][5].text == "not tested: one process per cell"
    assert not any(row[4].text.endswith(SIGNIFICANT_MARK) for table in report.image_pairs for row in table.rows)


def test_one_image_only_has_no_image_comparison(tmp_path):
    run = _subset(tmp_path, lambda record: record["environment"]["image_name"] == "stable")
    report = _report([run])
    _assert_well_formed(report)
    assert report.image_pairs == []
    assert [row[1].text for row in report.summary.rows] == ["stable (torch 2.0.1)"] * 4


def test_eager_only_renders_latency_tables_without_compile_columns(tmp_path):
    run = _subset(tmp_path, lambda record: record["cell"]["mode"] == "eager")
    report = _report([run])
    _assert_well_formed(report)
    assert report.compile_modes == []
    assert all(table.header == ["Task/Model", "eager"] for table in report.per_device)
    assert "geo-mean speed-up" not in report.summary.header
    assert "compile time (median s)" not in report.summary.header


def test_compiled_only_has_no_speedups(tmp_path):
    run = _subset(tmp_path, lambda record: record["cell"]["mode"] == "default")
    report = _report([run])
    _assert_well_formed(report)
    assert all(table.header == ["Task/Model", "default"] for table in report.per_device)
    assert not any("%" in cell.text for table in report.per_device for row in table.rows for cell in row)
    assert "geo-mean speed-up" not in report.summary.header


def test_a_failed_cell_alone_still_renders(tmp_path):
    run = _subset(tmp_path, lambda record: record["status"] == "oom")
    report = _report([run])
    _assert_well_formed(report)
    assert report.per_device[0].rows[0][1].text == "OOM"


def test_published_ms_beside_ms_on_a_published_gpu():
    table = _report([FIXTURES / "gpu-run"]).published[0]
    assert table.title.endswith("stable (torch 2.0.1) vs published A100, main tables (torch 2.0)")
    assert {"measured (ms)", "published (ms)", "deviation"} <= set(table.header)


def test_published_speedups_side_by_side_elsewhere(tmp_path):
    run = _subset(tmp_path, lambda record: True)
    for path in run.rglob("*_float32.json"):
        record = json.loads(path.read_text())
        record["environment"]["gpu_name"] = "NVIDIA H100 80GB HBM3"
        path.write_text(json.dumps(record))
    table = _report([run]).published[0]
    assert table.header[3:] == ["measured speed-up", "A100 (published)", "V100 (published)", "T4 (published)"]
    assert all(row[2].text != "eager" for row in table.rows)


def test_tiny_models_are_not_compared_with_published_ones():
    table = _report([FIXTURES / "cpu-run"], sources={"local": "main"}).published[0]
    assert [row[0].text for row in table.rows] == ["Image Classification/ViT"]


def test_an_image_of_another_torch_line_is_compared_with_nothing_by_default():
    assert _report([FIXTURES / "cpu-run"]).published == []   # torch 2.13


def test_run_note_is_shown_and_absence_tolerated(tmp_path):
    [note] = _report([FIXTURES / "cpu-run"]).notes
    assert note.startswith("SYNTHETIC fixture") and note.endswith("no NVIDIA GPU: CPU smoke matrix.")
    run = _subset(tmp_path, lambda record: True, run="cpu-run")
    (run / "run.json").unlink()
    assert _report([run]).notes == []


def test_partial_markdown_has_no_empty_cells(tmp_path):
    run = _subset(tmp_path, lambda record: record["cell"]["batch_size"] == 4 and record["cell"]["model"] == "vit")
    build_report([run], tmp_path / "out", ["md"])
    text = (tmp_path / "out" / "report.md").read_text()
    assert not re.search(r"\|[ \t]*\|", text)
    assert "## Image against image" in text and "## Cells that did not run" not in text
