"""Reading, validating and merging records into one table."""
import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from matrixbench.errors import ManifestError, ReportError
from matrixbench.report import records
from runner.core import Record
from runner.schema import read_record, write_record

FIXTURES = Path(__file__).parent / "fixtures"
A_RECORD = FIXTURES / "gpu-run" / "stable" / "vit_bs1_eager_float32.json"


def _copy_run(tmp_path, name="gpu-run"):
    return Path(shutil.copytree(FIXTURES / name, tmp_path / name))


def _edit(path, change):
    record = json.loads(path.read_text())
    change(record)
    path.write_text(json.dumps(record))


def test_finds_records_recursively_and_skips_manifests(tmp_path):
    run = _copy_run(tmp_path)
    (run / "stable" / "cells.json").write_text(json.dumps({"schema_version": 1, "cells": []}))
    found = records.find_record_files([tmp_path])
    assert len(found) == len(list((FIXTURES / "gpu-run").rglob("*_float32.json")))
    assert all(path.name not in ("cells.json", "run.json") for path in found)


def test_json_under_hidden_folders_is_not_a_record(tmp_path):
    run = _copy_run(tmp_path)
    scratch = run / "stable" / ".scratch" / "matrixbench-cell-x" / "inductor"
    scratch.mkdir(parents=True)
    (scratch / "cache.json").write_text("{}")
    assert not [path for path in records.find_record_files([tmp_path]) if ".scratch" in str(path)]


def test_a_stray_json_file_is_named_not_skipped(tmp_path):
    run = _copy_run(tmp_path)
    (run / "notes.json").write_text(json.dumps({"not": "a record"}))
    with pytest.raises(ReportError, match="notes.json: schema_version None is not supported"):
        records.load_results([run])


def test_each_record_file_is_parsed_once(tmp_path, monkeypatch):
    run = _copy_run(tmp_path)
    parsed = []
    real_loads = json.loads
    monkeypatch.setattr(json, "loads", lambda text, **kw: parsed.append(text) or real_loads(text, **kw))
    frame = records.load_results([run])
    assert len(parsed) == len(frame) == len(records.find_record_files([run]))


def test_one_row_per_cell_with_dotted_environment_columns():
    frame = records.load_results([FIXTURES / "gpu-run"])
    assert len(frame) == len(frame[["image", "cell_id"]].drop_duplicates())
    assert {"environment.torch", "environment.gpu_name", "timing.mean_ms", "cell.batch_size"} <= set(frame.columns)
    stable = frame[frame["image"] == "stable"]
    assert set(stable["environment.torch"]) == {read_record(A_RECORD)["environment"]["torch"]}


def test_failed_cells_have_every_column_with_empty_timing():
    frame = records.load_results([FIXTURES / "gpu-run"])
    oom = frame[frame["status"] == "oom"]
    assert len(oom) == 2 and oom["timing.mean_ms"].isna().all()
    assert list(frame.columns) == records.COLUMNS


def test_integer_fields_stay_integers():
    frame = records.load_results([FIXTURES / "gpu-run"])
    assert str(frame["timing.n"].dtype) == "Int64"
    assert str(frame["cell.batch_size"].dtype) == "Int64"


def test_unknown_schema_version_is_refused(tmp_path):
    run = _copy_run(tmp_path)
    _edit(run / "stable" / A_RECORD.name, lambda record: record.update(schema_version=99))
    with pytest.raises(ReportError, match="schema_version 99 is newer than this matrixbench"):
        records.load_results([run])


def test_a_record_breaking_the_schema_names_file_and_field(tmp_path):
    run = _copy_run(tmp_path)
    _edit(run / "stable" / A_RECORD.name, lambda record: record["timing"].update(mean_ms="fast"))
    with pytest.raises(ReportError, match=r"vit_bs1_eager_float32.json: field timing.mean_ms: 'fast'"):
        records.load_results([run])


def test_broken_json_is_reported_with_its_path(tmp_path):
    run = _copy_run(tmp_path)
    (run / "stable" / "half.json").write_text('{"schema_version": 1, ')
    with pytest.raises(ReportError, match="half.json: not a readable record"):
        records.load_results([run])


def test_missing_folder_and_empty_folder_are_errors(tmp_path):
    with pytest.raises(ReportError, match="does not exist"):
        records.load_results([tmp_path / "nope"])
    with pytest.raises(ReportError, match="no records under"):
        records.load_results([tmp_path])


def test_two_runs_of_a_cell_both_count_and_the_report_says_so(tmp_path):
    """Issue 33: "the newest record wins" dropped the older measurement silently; a merge is a union."""
    older = tmp_path / "run-1" / "stable"
    newer = tmp_path / "run-2" / "stable"
    record = read_record(A_RECORD)
    write_record(older, Record.from_dict(record))
    write_record(newer, Record.from_dict({**record, "started_at": "2030-01-01T00:00:00+00:00",
                                          "timing": {**record["timing"], "mean_ms": 1.5}}))
    notes = []
    frame = records.load_results([tmp_path], notes=notes)
    assert sorted(frame["timing.mean_ms"]) == [1.5, record["timing"]["mean_ms"]]
    assert sorted(frame["run"]) == ["run-1", "run-2"]
    assert any("Runs run-1 and run-2 measured the same 1 cell(s)" in note and "count together" in note
               for note in notes)


def _write(folder, repeat, started_at="2024-11-02T10:00:00+00:00", settings=None, environment=None, mean_ms=None):
    """A_RECORD as process ``repeat`` of its cell under ``folder`` (an image folder), changed as given."""
    record = read_record(A_RECORD)
    record.update(repeat=repeat, started_at=started_at, settings={**record["settings"], **(settings or {})},
                  environment={**record["environment"], **(environment or {})})
    record["timing"]["mean_ms"] = mean_ms or record["timing"]["mean_ms"]
    write_record(folder, Record.from_dict(record))


def _rows(frame, cell_id="vit_bs1_eager_float32"):
    from matrixbench.report.cells import CellIndex
    return [row for row in CellIndex(frame).rows if row["cell_id"] == cell_id]


@pytest.mark.parametrize("other", [{"started_at": "2024-11-02T11:00:00+00:00"}, {"mean_ms": 1.5}],
                         ids=["start", "measurement"])
def test_two_processes_that_differ_only_in_their_start_or_measurement_both_count(tmp_path, other):
    """No part of the identity comes from the folder's name: what keeps two runs' records of a cell apart is
    the process (its start) or, for records made with one start time, what they measured."""
    _write(tmp_path / "run-1" / "stable", 0)
    _write(tmp_path / "run-2" / "stable", 0, **other)
    notes = []
    frame = records.load_results([tmp_path], notes=notes)
    assert [row["processes"] for row in _rows(frame)] == [2]
    assert not any("reached twice" in note for note in notes), notes


def test_one_runs_processes_with_other_settings_are_rows_of_their_own(tmp_path):
    """run --force with fewer --repeats replaced repeat 0 only: repeat 1 kept the old iterations, and the two
    were pooled in one row without a word (the settings were compared across runs only)."""
    _write(tmp_path / "run-1" / "stable", 0, settings={"iterations": 50})
    _write(tmp_path / "run-1" / "stable", 1, started_at="2024-11-02T09:00:00+00:00", settings={"iterations": 20})
    notes = []
    rows = _rows(records.load_results([tmp_path], notes=notes))
    assert sorted((row["settings_label"], row["processes"]) for row in rows) == [
        ("iterations 20, warmup 10, accuracy_tolerance 0.01", 1),
        ("iterations 50, warmup 10, accuracy_tolerance 0.01", 1)]
    assert any(note.startswith("Processes of run run-1 measured the same 1 cell(s) (vit_bs1_eager_float32) with "
                               "other settings") and "a row of their own" in note for note in notes), notes


def test_processes_under_other_torch_versions_are_rows_of_their_own_and_the_environment_lists_both(tmp_path):
    """A resume after pip install -U torch (the local backend) pooled both torches' processes in one cell,
    and the Environment table showed one of them."""
    from matrixbench.report.cells import CellIndex, row_label
    from matrixbench.report.tables import environment_table

    _write(tmp_path / "run-1" / "stable", 0, environment={"torch": "2.9.1+cpu"})
    _write(tmp_path / "run-1" / "stable", 1, started_at="2024-11-02T11:00:00+00:00",
           environment={"torch": "2.13.0+cpu"})
    notes = []
    frame = records.load_results([tmp_path], notes=notes)
    rows = _rows(frame)
    assert sorted((row_label(row), row["processes"]) for row in rows) == [
        ("Image Classification/ViT (torch 2.13.0+cpu)", 1), ("Image Classification/ViT (torch 2.9.1+cpu)", 1)]
    assert ("Processes of run run-1 measured the same 1 cell(s) (vit_bs1_eager_float32) under other versions "
            "(torch 2.9.1+cpu, 2.13.0+cpu)") in " ".join(notes), notes
    table = environment_table(CellIndex(frame))
    assert sorted(table.rows[0][table.header.index("torch")].text.split(", ")) == ["2.13.0+cpu", "2.9.1+cpu"]


def test_two_machines_under_other_transformers_are_rows_of_their_own(tmp_path):
    _write(tmp_path / "a" / "run-1" / "stable", 0)
    _write(tmp_path / "b" / "run-1" / "stable", 0, environment={"hostname": "other", "transformers": "5.0.0"})
    notes = []
    rows = _rows(records.load_results([tmp_path / "a", tmp_path / "b"], notes=notes))
    assert sorted(row["settings_label"] for row in rows) == ["transformers 4.43.4", "transformers 5.0.0"]
    assert any("under other versions (transformers 4.43.4, 5.0.0)" in note for note in notes), notes


def _write_own(folder, started_at, **cell):
    """A_RECORD as a local model's ("mine", from a config.json) process."""
    record = read_record(A_RECORD)
    record.update(started_at=started_at, cell={**record["cell"], "model": "mine", "model_id": None,
                                               "config_path": "/models/mine/config.json", **cell})
    write_record(folder, Record.from_dict(record))


def test_runs_of_a_local_model_whose_files_changed_between_them_are_rows_of_their_own(tmp_path):
    """The config edited between two runs: the same cell id measured two models, which were pooled as one ("their
    processes count together")."""
    from matrixbench.report.cells import CellIndex, row_label

    _write_own(tmp_path / "run-1" / "stable", "2024-11-02T10:00:00+00:00", model_hash="sha256:0000000000000001")
    _write_own(tmp_path / "run-2" / "stable", "2024-11-02T11:00:00+00:00", model_hash="sha256:0000000000000002")
    _write_own(tmp_path / "run-3" / "stable", "2024-11-02T12:00:00+00:00", model_hash="sha256:0000000000000002")
    notes = []
    frame = records.load_results([tmp_path], notes=notes)
    rows = [row for row in CellIndex(frame).rows if row["cell_id"] == "mine_bs1_eager_float32"]
    assert sorted((row_label(row), row["processes"]) for row in rows) == [
        ("Image Classification/mine (model sha256:0000000000000001, random weights)", 1),
        ("Image Classification/mine (model sha256:0000000000000002, random weights)", 2)]
    assert any("measured the same 1 cell(s) (mine_bs1_eager_float32) of another model under one name" in note
               for note in notes), notes
    assert not any("count together" in note for note in notes), notes


def test_a_local_models_record_without_its_hash_is_not_pooled_with_one_that_has_it(tmp_path):
    from matrixbench.report.cells import CellIndex

    _write_own(tmp_path / "run-1" / "stable", "2024-11-02T10:00:00+00:00")
    _write_own(tmp_path / "run-2" / "stable", "2024-11-02T11:00:00+00:00", model_hash="sha256:0000000000000002")
    frame = records.load_results([tmp_path])
    rows = [row for row in CellIndex(frame).rows if row["cell_id"] == "mine_bs1_eager_float32"]
    assert sorted(row["settings_label"] for row in rows) == ["model sha256:0000000000000002, random weights",
                                                             "model unknown, random weights"]


def _write_hub(folder, started_at, revision=None, commit=None):
    """A_RECORD as a hub model's ("hubby", org/hubby) process, at ``revision`` (None: main), from ``commit``."""
    record = read_record(A_RECORD)
    record.update(started_at=started_at, cell={**record["cell"], "model": "hubby", "model_id": "org/hubby",
                                               "config_path": None, **({"revision": revision} if revision else {})})
    if commit:
        record["model_commit"] = commit
    write_record(folder, Record.from_dict(record))


def test_processes_of_a_hub_model_at_other_revisions_or_commits_are_rows_of_their_own(tmp_path):
    """main moved between two runs (another commit), then a run pinned v2: three models under one name."""
    from matrixbench.report.cells import CellIndex, row_label

    main, moved = "1" * 40, "2" * 40
    _write_hub(tmp_path / "run-1" / "stable", "2024-11-02T10:00:00+00:00", commit=main)
    _write_hub(tmp_path / "run-2" / "stable", "2024-11-02T11:00:00+00:00", commit=moved)
    _write_hub(tmp_path / "run-3" / "stable", "2024-11-02T12:00:00+00:00", revision="v2", commit=moved)
    _write_hub(tmp_path / "run-4" / "stable", "2024-11-02T13:00:00+00:00", revision="v2", commit=moved)
    notes = []
    frame = records.load_results([tmp_path], notes=notes)
    rows = [row for row in CellIndex(frame).rows if row["cell_id"] == "hubby_bs1_eager_float32"]
    assert sorted((row_label(row), row["processes"]) for row in rows) == [
        ("Image Classification/hubby (model org/hubby commit 111111111111, random weights)", 1),
        ("Image Classification/hubby (model org/hubby commit 222222222222, random weights)", 1),
        ("Image Classification/hubby (model org/hubby@v2 commit 222222222222, random weights)", 2)]
    assert any("(its hub id, revision or commit, its local config" in note for note in notes), notes


def test_image_falls_back_to_the_folder_name():
    frame = records.load_results([FIXTURES / "cpu-run"])
    assert set(frame["image"]) == {"local"}
    assert set(frame["environment.image_name"].isna()) == {True}


def test_device_name_and_published_gpu():
    frame = records.load_results([FIXTURES / "gpu-run", FIXTURES / "cpu-run"])
    assert set(zip(frame["device_name"], frame["published_gpu"].fillna("-"))) == {
        ("NVIDIA A100-SXM4-40GB", "A100"), ("CPU (SYNTHETIC CPU)", "-")}


def test_run_notes_and_image_order_come_from_manifests(tmp_path):
    notes = records.run_notes(records.read_manifests([FIXTURES]))
    assert len(notes) == 3 and sum("no NVIDIA GPU: CPU smoke matrix" in note for note in notes) == 1
    assert records.image_order(records.read_manifests([FIXTURES / "gpu-run"])) == ["stable", "nightly"]
    run = _copy_run(tmp_path)
    (run / "run.json").unlink()
    assert records.read_manifests([run]) == []


def test_each_manifest_is_read_once_through_the_manifest_reader(monkeypatch):
    read = []
    real = records.read_manifest
    monkeypatch.setattr(records, "read_manifest", lambda path: read.append(path) or real(path))
    manifests = records.read_manifests([FIXTURES])
    assert len(read) == len(manifests) == len(set(read)) == 3


@pytest.mark.parametrize("text, message", [
    ('{"schema_version": 99}', "schema_version 99 is not supported"),
    ('{"note": "no version"}', "schema_version None is not supported"),
    ("{broken", "not a readable run.json \\(not valid JSON"),
    ('{"schema_version": 1, "history": "oops"}', "field history: 'oops' is not of type 'array'"),
])
def test_a_bad_manifest_is_the_same_error_as_in_run(tmp_path, text, message):
    """A corrupt run.json is a ManifestError (exit 8) in report as in run."""
    run = _copy_run(tmp_path)
    (run / "run.json").write_text(text)
    with pytest.raises(ManifestError, match=message) as raised:
        records.read_manifests([run])
    assert raised.value.exit_code == 8


def test_merged_table_is_written_as_csv_and_jsonl(tmp_path):
    frame = records.load_results([FIXTURES / "gpu-run"])
    csv_path, jsonl_path = records.write_merged(frame, tmp_path)
    header = csv_path.read_text().splitlines()[0].split(",")
    assert "timing.samples_ms" not in header and "timing.mean_ms" in header
    lines = [json.loads(line) for line in jsonl_path.read_text().splitlines()]
    assert len(lines) == len(frame) == len(csv_path.read_text().splitlines()) - 1
    ok = next(line for line in lines if line["status"] == "ok")
    assert isinstance(ok["timing.samples_ms"], list) and isinstance(ok["timing.n"], int)
    failed = next(line for line in lines if line["status"] == "oom")
    assert failed["timing.mean_ms"] is None


def test_results_csv_has_one_line_per_record_and_images_in_matrix_order(tmp_path):
    frame = records.load_results([FIXTURES / "gpu-run"])
    assert any("\n" in str(text) for text in frame["error.traceback"].dropna())   # the case at hand
    csv_path, _ = records.write_merged(frame, tmp_path, ["stable", "nightly"])
    lines = csv_path.read_text().splitlines()
    assert len(lines) == len(frame) + 1
    written = pd.read_csv(csv_path)
    assert list(dict.fromkeys(written["image"])) == ["stable", "nightly"]
    traceback = written["error.traceback"].dropna().iloc[0]
    assert "\\n" in traceback and "\n" not in traceback


def test_results_csv_writes_lists_joined_not_as_python_reprs(tmp_path):
    run = _copy_run(tmp_path)
    record = run / "stable" / "vit_bs1_default_float32.json"
    output = {"shape": [1, 1000], "max_abs_diff": 0.0, "ref_max_abs": 1.0, "rel_error": 0.0, "cosine": 1.0,
              "flag": None}
    _edit(record, lambda data: (data["timing"].update(flags=["no_cudagraphs", "throttled"]),
                                data["accuracy"].update(outputs=[output])))
    frame = records.load_results([run])
    csv_path, jsonl_path = records.write_merged(frame, tmp_path)
    written = pd.read_csv(csv_path, keep_default_na=False)
    flags = written.set_index(["image", "cell_id"]).loc[("stable", "vit_bs1_default_float32"), "timing.flags"]
    assert flags.split(records.CSV_LIST_SEPARATOR) == ["no_cudagraphs", "throttled"]
    assert not any("[" in text for text in written["timing.flags"])
    assert [json.loads(text) for text in written["accuracy.outputs"] if text] == [[output]]
    lines = [json.loads(line) for line in jsonl_path.read_text().splitlines()]
    assert [line["timing.flags"] for line in lines if line["source"] == str(record)] == [
        ["no_cudagraphs", "throttled"]]


@pytest.mark.parametrize("value, written", [
    (["noisy"], "noisy"), ([], ""), ([0, 1], "0;1"), (None, None), ("a;b", "a;b"),
    ([{"shape": [1, 2]}], '[{"shape":[1,2]}]'),
])
def test_csv_value(value, written):
    assert records.csv_value(value) == written


def test_flatten_uses_dotted_keys_and_keeps_lists():
    flat = records.flatten({"a": {"b": 1, "c": {"d": [1, 2]}}, "e": None})
    assert flat == {"a.b": 1, "a.c.d": [1, 2], "e": None}


def test_the_models_table_names_each_models_source_weights_task_and_files(tmp_path):
    """Shipped, hub at main and at a revision (two commits of main: two rows), local with and without its hash."""
    from matrixbench.report.cells import CellIndex
    from matrixbench.report.model_table import models_table

    shutil.copy(A_RECORD, tmp_path / "vit.json")   # the shipped vit, random weights
    _write_hub(tmp_path / "run-1" / "stable", "2024-11-02T10:00:00+00:00", commit="1" * 40)
    _write_hub(tmp_path / "run-2" / "stable", "2024-11-02T11:00:00+00:00", commit="2" * 40)
    _write_hub(tmp_path / "run-3" / "stable", "2024-11-02T12:00:00+00:00", revision="v2", commit="2" * 40)
    _write_own(tmp_path / "run-4" / "stable", "2024-11-02T13:00:00+00:00", model_hash="sha256:0000000000000002")
    _write_own(tmp_path / "run-5" / "stable", "2024-11-02T14:00:00+00:00", weights="pretrained")
    table = models_table(CellIndex(records.load_results([tmp_path])))
    assert table.header == ["Model", "Source", "Weights", "Task", "Files"]
    assert sorted([cell.text for cell in row] for row in table.rows) == [
        ["hubby", "hub org/hubby (main)", "random", "image-classification", "commit 111111111111"],
        ["hubby", "hub org/hubby (main)", "random", "image-classification", "commit 222222222222"],
        ["hubby", "hub org/hubby@v2", "random", "image-classification", "commit 222222222222"],
        ["mine", "local /models/mine/config.json", "pretrained", "image-classification", "unknown"],
        ["mine", "local /models/mine/config.json", "random", "image-classification", "sha256:0000000000000002"],
        ["vit", "shipped (google/vit-base-patch16-224)", "random", "image-classification", "shipped config"]]
