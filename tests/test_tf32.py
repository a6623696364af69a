"""The tf32 axis end to end: matrix key and --tf32, the cells and their ids, the runner's flags, records,
report rows, the published comparison (only tf32-off cells) and the comparisons (tf32 against tf32)."""
import json

import pytest

from host_helpers import make_record, small_matrix_data, write_matrix
from matrixbench.matrix import Overrides, expand_cells, load_matrix
from matrixbench.matrix.comparisons import ImageCells, comparisons
from matrixbench.report import records
from matrixbench.report.cells import CellIndex, row_label
from matrixbench.report.comparisons import comparisons as report_rows
from matrixbench.report.published import PublishedReference, load_published
from runner.cells_file import validate_cell
from runner.core import Cell
from runner.schema import load_record, write_record


def _cell(**changes):
    base = dict(model="vit", task="image-classification", weights="random", size="full", batch_size=1,
                mode="default", fullgraph=False, dtype="float32")
    return Cell(**{**base, **changes})


def test_off_by_default_and_absent_from_a_cell_so_ids_cells_and_matrix_hashes_are_as_before(tmp_path):
    matrix = load_matrix(write_matrix(tmp_path))
    assert matrix.tf32 is False and "tf32" not in matrix.to_dict()
    cell = expand_cells(matrix)[0]
    assert cell.tf32 is False and "tf32" not in cell.to_dict() and "tf32" not in cell.id
    assert validate_cell(cell.to_dict()) == cell


@pytest.mark.parametrize("how", ["file", "flag", "set"])
def test_on_from_the_matrix_the_flag_or_set(tmp_path, how):
    data = dict(small_matrix_data(), **({"tf32": True} if how == "file" else {}))
    overrides = {"flag": Overrides(tf32=True), "set": Overrides(sets={"tf32": True})}.get(how)
    matrix = load_matrix(write_matrix(tmp_path, data), overrides)
    cells = expand_cells(matrix)
    assert matrix.tf32 is True and matrix.to_dict()["tf32"] is True
    assert all(cell.tf32 for cell in cells) and cells[0].id == "vit_bs1_eager_float32_tf32"
    assert validate_cell(cells[0].to_dict()) == cells[0] and cells[0].to_dict()["tf32"] is True


def test_the_command_line_flags(tmp_path):
    from click.testing import CliRunner

    from matrixbench.cli import main
    from runner.cli import build_parser, cells_file_from_args

    result = CliRunner().invoke(main, ["validate", "--matrix", str(write_matrix(tmp_path)), "--tf32"])
    assert result.exit_code == 0, result.output
    args = build_parser().parse_args(["--out", "OUT", "--models", "vit", "--modes", "eager", "--tf32"])
    assert [cell.id for cell in cells_file_from_args(args).cells] == ["vit_bs1_eager_float32_tf32"]
    args = build_parser().parse_args(["--out", "OUT", "--models", "vit", "--modes", "eager"])
    assert [cell.tf32 for cell in cells_file_from_args(args).cells] == [False]


def test_the_runner_sets_tf32_matmuls_for_the_cell_and_the_seeds_flags_otherwise():
    torch = pytest.importorskip("torch")
    from runner.precision import apply_precision

    try:
        on = apply_precision(_cell(tf32=True))
        assert on == {"float32_matmul_precision": "high", "cuda_matmul_allow_tf32": True, "cudnn_allow_tf32": True}
        off = apply_precision(_cell())
        assert off == {"float32_matmul_precision": "highest", "cuda_matmul_allow_tf32": False,
                       "cudnn_allow_tf32": True}
        assert apply_precision() == off
    finally:
        torch.set_float32_matmul_precision("highest")


def test_records_report_rows_and_the_published_comparison(tmp_path):
    run = tmp_path / "run"
    cells = [_cell(mode=mode, tf32=tf32) for mode in ("eager", "default") for tf32 in (False, True)]
    for cell in cells:
        write_record(run / "stable", make_record(cell, mean_ms=2.0 if cell.tf32 else 3.0))
    (run / "run.json").write_text(json.dumps({"schema_version": 1, "images": ["stable"]}))
    assert load_record(run / "stable" / "vit_bs1_default_float32_tf32.json").cell.tf32 is True
    assert "tf32" not in json.loads((run / "stable" / "vit_bs1_default_float32.json").read_text())["cell"]
    index = CellIndex(records.load_results([run]), ["stable"])
    rows = {row["row_key"]: row for row in index.rows if row["cell.mode"] == "default"}
    assert set(rows) == {"vit", "vit tf32"}
    assert row_label(rows["vit tf32"]) == "Image Classification/ViT (tf32)"
    reference = PublishedReference(load_published())
    assert reference.comparable(rows["vit"], "main") and not reference.comparable(rows["vit tf32"], "main")
    # a speed-up compares tf32 with tf32: the eager cell of the same row
    assert index.speedup_baseline(rows["vit tf32"])["row_key"] == "vit tf32"
    speedups = [row for row in report_rows(index, load_published(), {"stable": "main"}) if row["kind"] == "speedup"]
    assert sorted(row["model"] for row in speedups) == ["vit", "vit tf32"]


def test_tf32_cells_compare_with_tf32_cells():
    cells = [_cell(mode=mode, tf32=tf32) for mode in ("eager", "default", "max-autotune") for tf32 in (False, True)]
    found = comparisons([[ImageCells("stable", "stable", cells)]])
    assert found and all(c.baseline[1].tf32 == c.candidate[1].tf32 for c in found)
    assert len(found) == 6   # per tf32 value: 2 speed-ups, 1 mode change


def test_the_reports_tf32_line_names_the_tf32_rows():
    import pandas as pd

    from matrixbench.report.precision_notes import precision_notes

    def frame(*tf32s):
        return pd.DataFrame([{"precision.float32_matmul_precision": "high" if on else "highest",
                              "precision.tf32_available": True, "precision.cudnn_allow_tf32": True,
                              "cell.tf32": on or None} for on in tf32s])

    assert "in the rows named tf32" in precision_notes(frame(False, True))[0]
    assert "TF32 was on for float32 matmuls in every record" in precision_notes(frame(True))[0]
    assert "TF32 was off" in precision_notes(frame(False, False))[0]
