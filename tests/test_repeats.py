"""Repeats of a cell (issue 13): one process and one record each, interleaved order with a
recorded seed, resume repeat by repeat, the repeat index in records end to end."""
import json
from pathlib import Path

import jsonschema
import pytest

from host_helpers import RecordingBackend, make_record, small_matrix_data, use_backend, write_matrix
from matrixbench.matrix import Overrides, expand_cells, load_matrix
from matrixbench.run.command import RunOptions, run_matrix
from matrixbench.run.manifest import read_manifest
from matrixbench.run.pending import interleaved, pending_work
from runner.cells_file import CellsFileError, cells_file_from_dict, load_cells_file
from runner.core import Record
from runner.schema import CELLS_SCHEMA, needs_run, read_record, record_path, write_record

PROJECT_ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def matrix(tmp_path):
    data = small_matrix_data()
    data["images"] = {"latest": data["images"]["latest"]}
    return load_matrix(write_matrix(tmp_path, data), Overrides(repeats=3))


def _options(tmp_path, **changes):
    return RunOptions(**{"run_name": "r1", "results_root": tmp_path / "results", "backend": "local",
                         "device": "cpu", "cache_root": tmp_path / "cache", "hf_cache_dir": tmp_path / "hf",
                         **changes})


# --- order ---------------------------------------------------------------------------------

def test_repeats_interleave_across_cells_and_modes_stay_together_per_model(matrix):
    cells = expand_cells(matrix)                # 2 models x 2 batch sizes x eager/default
    order = interleaved(cells, 3, seed=7)
    assert [r.index for r in order] == [0] * 8 + [1] * 8 + [2] * 8
    for index in range(3):
        within = [r.cell for r in order if r.index == index]
        assert sorted(within, key=cells.index) == cells
        # each model's two modes (same batch size and dtype) run one after the other
        pairs = [within[i:i + 2] for i in range(0, 8, 2)]
        assert all({a.mode, b.mode} == {"eager", "default"} and a.id.split("_")[:2] == b.id.split("_")[:2]
                   for a, b in pairs)


def test_the_mode_order_is_shuffled_by_the_seed_and_reproducible(matrix):
    cells = expand_cells(matrix)
    modes = {seed: [r.cell.mode for r in interleaved(cells, 3, seed)] for seed in range(20)}
    assert interleaved(cells, 3, 5) == interleaved(cells, 3, 5)
    assert len({tuple(order) for order in modes.values()}) > 1          # the seed changes the order
    assert any(order[0] == "default" for order in modes.values())       # eager is not always first


def test_the_seed_is_recorded_in_run_json_and_the_cells_file(matrix, tmp_path, monkeypatch):
    backend = use_backend(monkeypatch, RecordingBackend())
    run_matrix(matrix, _options(tmp_path, order_seed=1234))
    run_path = tmp_path / "results" / "r1"
    assert read_manifest(run_path)["order_seed"] == 1234
    cells_file = json.loads((run_path / "latest" / "cells.json").read_text())
    assert cells_file["order_seed"] == 1234
    jsonschema.validate(cells_file, CELLS_SCHEMA)
    plan = load_cells_file(run_path / "latest" / "cells.json")   # the last runner's input: repeat 2
    assert plan.repeats == backend.requests[-1].repeats()
    ran = [repeat for request in backend.requests for repeat in request.repeats()]
    assert ran == interleaved(expand_cells(matrix), 3, 1234)


def test_images_take_turns_repeat_by_repeat_counterbalanced(tmp_path, monkeypatch):
    """Repeat 0 in every image, then repeat 1 in every image in the reverse order (ABBA): a load that
    drifts during the run falls on both sides of an image-vs-image comparison alike."""
    backend = use_backend(monkeypatch, RecordingBackend())
    matrix = load_matrix(write_matrix(tmp_path), Overrides(repeats=2, models=["vit"], batch_sizes=[1]))
    summary = run_matrix(matrix, _options(tmp_path, order_seed=5))
    order = [(request.image.name, sorted({r.index for r in request.repeats()})) for request in backend.requests]
    assert order == [("stable", [0]), ("latest", [0]), ("latest", [1]), ("stable", [1])]
    assert summary.statuses() == {"ok": 8} and [image.ran for image in summary.images] == [4, 4]


# --- records and resume --------------------------------------------------------------------

def test_each_repeat_has_its_own_record_file_carrying_its_index(matrix, tmp_path, monkeypatch):
    use_backend(monkeypatch, RecordingBackend())
    summary = run_matrix(matrix, _options(tmp_path))
    out_dir = tmp_path / "results" / "r1" / "latest"
    cell = expand_cells(matrix)[0]
    assert [p.name for p in sorted(out_dir.glob(f"{cell.id}*.json"))] == [
        f"{cell.id}.json", f"{cell.id}.r1.json", f"{cell.id}.r2.json"]
    assert [read_record(record_path(out_dir, cell, k))["repeat"] for k in range(3)] == [0, 1, 2]
    assert summary.statuses() == {"ok": 24}


def test_an_interrupted_run_resumes_repeat_by_repeat(matrix, tmp_path, monkeypatch):
    use_backend(monkeypatch, RecordingBackend(stop_after=16))        # Ctrl-C after repeat 2 of 3
    with pytest.raises(KeyboardInterrupt):
        run_matrix(matrix, _options(tmp_path))
    backend = use_backend(monkeypatch, RecordingBackend())
    summary = run_matrix(matrix, _options(tmp_path))
    assert {r.index for r in backend.requests[0].repeats()} == {2}
    assert sorted(backend.requests[0].work.cells, key=str) == sorted(expand_cells(matrix), key=str)
    assert (summary.images[0].ran, summary.images[0].skipped) == (8, 16)


def test_resume_asks_the_one_rule_per_repeat(tmp_path):
    cell = expand_cells(load_matrix(write_matrix(tmp_path)))[0]
    record = make_record(cell)
    record.repeat = 1
    write_record(tmp_path, record)
    assert (needs_run(tmp_path, cell), needs_run(tmp_path, cell, repeat=1)) == (True, False)
    assert pending_work(load_matrix(write_matrix(tmp_path), Overrides(repeats=2)), tmp_path)[0].done == 0


def test_a_record_without_a_repeat_index_is_repeat_0():
    data = make_record(_any_cell()).to_dict()
    del data["repeat"]
    assert Record.from_dict(data).repeat == 0
    v1 = dict(data, schema_version=1, cell=dict(data["cell"], fault=None))
    assert Record.from_dict(v1).repeat == 0


def _any_cell():
    return cells_file_from_dict({"cells": [{"model": "vit", "task": "image-classification", "weights": "random",
                                     "size": "tiny", "batch_size": 1, "mode": "eager", "fullgraph": False,
                                     "dtype": "float32"}]}).cells[0]


def test_the_cells_file_refuses_a_bad_schedule():
    cell = _any_cell().to_dict()
    for bad in ([[1, 0]], [[0, -1]], [[0, 0], [0, 0]], [[0]], []):
        with pytest.raises(CellsFileError, match="repeats"):
            cells_file_from_dict({"cells": [cell], "repeats": bad})


# --- end to end ----------------------------------------------------------------------------

def test_repeat_indexes_end_to_end_with_the_local_backend(tmp_path, monkeypatch):
    """`matrixbench run --backend local --repeats 2`: a tiny eager cell in two processes."""
    from click.testing import CliRunner

    from matrixbench.cli import main

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)
    args = ["run", "--matrix", str(PROJECT_ROOT / "matrix-cpu-smoke.yaml"), "--images", "latest",
            "--models", "resnet", "--modes", "eager", "--iterations", "2", "--warmup", "0", "--repeats", "2",
            "--size", "tiny", "--backend", "local", "--device", "cpu", "--cache-dir", str(tmp_path / "cache")]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    out_dir = tmp_path / "results" / "default" / "latest"
    records = [read_record(p) for p in sorted(out_dir.glob("resnet-tiny_*.json"))]
    assert [(r["repeat"], r["status"], r["cell_id"]) for r in records] == [
        (0, "ok", "resnet-tiny_bs1_eager_float32"), (1, "ok", "resnet-tiny_bs1_eager_float32")]
    assert records[0]["started_at"] <= records[1]["started_at"]
    assert records[0]["environment"]["hostname"] == records[1]["environment"]["hostname"]


# --- compile cost in the report ------------------------------------------------------------

def test_the_summary_gives_the_first_compile_apart_from_the_warm_ones(matrix, tmp_path, monkeypatch):
    from matrixbench.report import records
    from matrixbench.report.cells import CellIndex
    from matrixbench.report.document import assemble
    from matrixbench.report.published import load_published

    use_backend(monkeypatch, RecordingBackend())
    run_matrix(matrix, _options(tmp_path))
    run_path = tmp_path / "results" / "r1"
    for path in (run_path / "latest").glob("*_default_*.json"):     # first call: 30 s cold, then 2 s, 4 s
        data = json.loads(path.read_text())
        data["timing"]["first_call_s"] = {0: 30.0, 1: 2.0, 2: 4.0}[data["repeat"]]
        path.write_text(json.dumps(data))
    frame = records.load_results([run_path])
    report = assemble(CellIndex(frame, ["latest"]), load_published(), [], charts=[])
    summary, details = report.summary, report.summary_details     # the warm compile: in the detailed summary
    row = next(row for row in summary.rows if row[summary.header.index("Mode")].text == "default")
    assert row[summary.header.index("compile time (median s)")].text == "30.0"
    row = next(row for row in details.rows if row[details.header.index("Mode")].text == "default")
    assert row[details.header.index("warm compile, later processes (median s)")].text == "3.0"
    legend = report.legends["summary"]     # what each column's number is: cold first compile vs warm repeats
    assert "\"compile time (median s)\": per cell, the first call of its first process" in legend
    assert "a cold compile, unless the image's compile cache was already warm" in legend
    assert "\"warm compile, later processes (median s)\": the first call of each cell's second and later" in legend


def test_without_repeats_the_legend_explains_only_the_columns_shown(tmp_path, monkeypatch):
    from matrixbench.report import records
    from matrixbench.report.cells import CellIndex
    from matrixbench.report.document import assemble
    from matrixbench.report.published import load_published

    data = small_matrix_data()
    data["images"] = {"latest": data["images"]["latest"]}
    matrix = load_matrix(write_matrix(tmp_path, data))     # one process per cell
    use_backend(monkeypatch, RecordingBackend())
    run_matrix(matrix, _options(tmp_path))
    report = assemble(CellIndex(records.load_results([tmp_path / "results" / "r1"]), ["latest"]), load_published(),
                      [], charts=[])
    assert "warm compile, later processes (median s)" not in report.summary.header
    assert "warm compile, later processes (median s)" not in report.summary_details.header
    assert "\"compile time (median s)\": per cell" in report.legends["summary"]
    assert "\"warm compile, later processes (median s)\"" not in report.legends["summary"]
