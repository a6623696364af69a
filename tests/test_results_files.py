"""Issue 33: the results folder is a database. One reader vouches for every file under results/
(matrixbench.run.results_files); merges keep every measurement (a union by its identity); one poisoned
file never stops a run; a report is written whole or not at all; secrets are hidden by value.

Real records: tests/data/h100-acc/ (copied from /work/shared/gpu-evidence/h100-2026-11-26/run-acc/acc/,
see its SOURCE.md).
"""
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from host_helpers import RecordingBackend, make_record, small_matrix_data, use_backend
from matrixbench.cli import main
from matrixbench.errors import ManifestError
from matrixbench.matrix import expand_cells, load_matrix
from matrixbench.report import records
from matrixbench.report.cells import CellIndex
from matrixbench.run import results_files
from matrixbench.run.results_files import Unvouched, read_record
from runner.core import SCHEMA_VERSION
from runner.schema import record_path

REAL = Path(__file__).parent / "data" / "h100-acc" / "acc"
A_RECORD = REAL / "latest" / "resnet_bs1_eager_float32.json"
ROOT = Path(__file__).resolve().parent.parent


def copy_run(target, hostname=None, gpu_uuid=None, shift_s=0):
    """The real run, copied to ``target`` (a run folder); with ``hostname``/``gpu_uuid``/``shift_s``, as if
    another machine had run it (its records and run.json start ``shift_s`` seconds later)."""
    shutil.copytree(REAL, target)
    for path in Path(target).rglob("*.json"):
        os.chmod(path, 0o644)
    if hostname is None:
        return Path(target)
    for path in (Path(target) / "latest").glob("*.json"):
        data = json.loads(path.read_text())
        data["environment"].update(hostname=hostname, gpu_uuid=gpu_uuid)
        data["placement"]["gpu_uuid"] = gpu_uuid
        data["started_at"] = data["started_at"].replace(":40+", f":{40 + shift_s % 19:02d}+")
        data["timing"]["mean_ms"] *= 1.01
        path.write_text(json.dumps(data))
    manifest = json.loads((Path(target) / "run.json").read_text())
    manifest["started_at"] = manifest["started_at"].replace(":00+", f":{shift_s % 59:02d}+")
    (Path(target) / "run.json").write_text(json.dumps(manifest))
    return Path(target)


def edit(path, change):
    data = json.loads(Path(path).read_text())
    change(data)
    Path(path).write_text(json.dumps(data))


# --- the reader ------------------------------------------------------------------------------

def test_the_real_records_and_run_json_are_vouched_for():
    for path in (REAL / "latest").glob("*.json"):
        assert read_record(path, REAL)["status"] == "ok"
    assert results_files.read_selftest(REAL / "selftest.json")["passed"] is False
    manifest = results_files.read_manifest_file(REAL / "run.json")
    results_files.check_manifest(manifest, REAL / "run.json")


@pytest.mark.parametrize("kind", ["fifo", "zero", "outside", "huge", "folder"])
def test_what_is_not_a_regular_file_inside_the_folder_is_never_read(tmp_path, kind):
    run = copy_run(tmp_path / "r" / "acc")
    path = run / "latest" / "resnet_bs1_eager_float32.json"
    path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "zero":
        path.symlink_to("/dev/zero")
    elif kind == "outside":
        outside = tmp_path / "elsewhere.json"
        shutil.copy(A_RECORD, outside)
        path.symlink_to(outside)
    elif kind == "huge":
        path.write_bytes(b" " * (results_files.MAX_BYTES["record"] + 1))
    else:
        path.mkdir()
    with pytest.raises(Unvouched) as raised:
        read_record(path, tmp_path / "r")
    words = {"fifo": "FIFO", "zero": "character device", "outside": "outside the results folder",
             "huge": "over the limit", "folder": "a folder"}[kind]
    assert str(path) in raised.value.line() and words in raised.value.line()


def test_a_link_inside_the_results_folder_is_followed(tmp_path):
    run = copy_run(tmp_path / "r" / "acc")
    link = run / "latest" / "again.json"
    link.symlink_to(run / "latest" / "resnet_bs1_eager_float32.json")
    assert read_record(link, tmp_path / "r")["status"] == "ok"


@pytest.mark.parametrize("field, value, words", [
    ("duration_s", float("nan"), "duration_s: nan is not a finite number"),
    ("duration_s", float("inf"), "duration_s: inf is not a finite number"),
    ("duration_s", -1, "duration_s: -1 is less than the minimum of 0"),
    ("duration_s", "52", "duration_s: '52' is not of type 'number'"),
    ("timing.mean_ms", -3.0, "timing.mean_ms: -3.0 is less than the minimum of 0"),
    ("timing.mean_ms", 0.0, "timing.mean_ms: 0.0 is less than or equal to the minimum of 0"),
    ("timing.mean_ms", float("nan"), "timing.mean_ms: nan is not a finite number"),
    ("timing.mean_ms", "17", "timing.mean_ms: '17' is not of type 'number'"),
    ("timing.samples_ms", [1.0, float("inf")], "timing.samples_ms.1: inf is not a finite number"),
    ("repeat", 10 ** 12, "repeat"),
    ("started_at", "yesterday", "started_at: 'yesterday' is not an ISO date"),
])
def test_a_value_no_measurement_has_is_refused_naming_the_file_and_field(tmp_path, field, value, words):
    path = tmp_path / "r.json"
    data = json.loads(A_RECORD.read_text())
    *parents, leaf = field.split(".")
    target = data
    for name in parents:
        target = target[name]
    target[leaf] = value
    path.write_text(json.dumps(data))
    with pytest.raises(Unvouched) as raised:
        read_record(path)
    assert str(path) in raised.value.line() and words in raised.value.line(), raised.value.line()


# --- one poisoned file never stops a run ------------------------------------------------------

def _small(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    import yaml

    (tmp_path / "m.yaml").write_text(yaml.safe_dump(small_matrix_data(), sort_keys=False))
    use_backend(monkeypatch, RecordingBackend(gpus=False))
    return expand_cells(load_matrix(tmp_path / "m.yaml"))


@pytest.mark.parametrize("value", [float("nan"), float("inf"), "an hour", -5])
def test_a_corrupt_duration_in_another_run_leaves_the_dry_run_and_the_run_working_with_a_line(
        tmp_path, monkeypatch, value):
    """Issue 33 item 2: the bill's estimate read another run's duration_s and crashed on NaN, inf, text."""
    cells = _small(tmp_path, monkeypatch)
    other = tmp_path / "results" / "older" / "stable"
    record = make_record(cells[0]).to_dict()
    record["duration_s"] = value
    other.mkdir(parents=True)
    path = record_path(other, cells[0])
    path.write_text(json.dumps(record))
    results_files._warned.clear()
    dry = CliRunner().invoke(main, ["run", "--matrix", "m.yaml", "--backend", "local", "--images", "stable",
                                    "--dry-run"])
    assert dry.exit_code == 0 and "Traceback" not in dry.output, dry.output
    shown = path.relative_to(tmp_path)
    assert f"warning: {shown}: field duration_s" in dry.output and "not used for the time estimate" in dry.output
    results_files._warned.clear()
    run = CliRunner().invoke(main, ["run", "--matrix", "m.yaml", "--backend", "local", "--images", "stable"])
    assert run.exit_code == 0, run.output
    assert json.loads((tmp_path / "results" / "default" / "run.json").read_text())["status"] == "finished"


@pytest.mark.parametrize("mean", [-2.0, "fast", float("nan"), 0.0])
def test_repeats_auto_never_counts_a_record_whose_mean_is_not_a_measurement(tmp_path, mean):
    from types import SimpleNamespace

    from matrixbench.executors.adaptive import recorded
    from runner.core import Cell

    cell = Cell.from_dict(json.loads(A_RECORD.read_text())["cell"])
    folder = tmp_path / "latest"
    folder.mkdir()
    shutil.copy(A_RECORD, record_path(folder, cell, 0))
    alone = recorded(SimpleNamespace(out_dir=folder), cell, 3).means   # the good process's estimate
    bad = json.loads(A_RECORD.read_text())
    bad.update(repeat=1)
    bad["timing"]["mean_ms"] = mean
    record_path(folder, cell, 1).write_text(json.dumps(bad))
    found = recorded(SimpleNamespace(out_dir=folder), cell, 3)
    assert len(alone) == 1 and found.means == alone
    assert found.taken == {0, 1}   # its repeat index is not reused: its file is never overwritten by another


def test_a_bad_record_of_this_run_is_rerun_not_kept(tmp_path, monkeypatch):
    cells = _small(tmp_path, monkeypatch)
    out = tmp_path / "results" / "default" / "stable"
    out.mkdir(parents=True)
    record = make_record(cells[0]).to_dict()
    record["timing"]["mean_ms"] = -1.0
    record_path(out, cells[0]).write_text(json.dumps(record))
    result = CliRunner().invoke(main, ["run", "--matrix", "m.yaml", "--backend", "local", "--images", "stable"])
    assert result.exit_code == 0, result.output
    assert read_record(record_path(out, cells[0]))["timing"]["mean_ms"] > 0


# --- merges keep every measurement --------------------------------------------------------------

def _cell(frame, cell_id):
    index = CellIndex(frame)
    return next(row for row in index.rows if row["cell_id"] == cell_id)


def test_two_machines_results_of_the_same_run_name_merge_with_every_process_counted(tmp_path):
    """Issue 33 item 1 (README step 5): two machines' results/<run> of one name; newest-wins dropped one."""
    one = copy_run(tmp_path / "machine-a" / "acc")
    two = copy_run(tmp_path / "machine-b" / "acc", hostname="vm-b", gpu_uuid="GPU-bbbb", shift_s=7)
    notes = []
    manifests = records.manifests_by_folder([one, two])
    frame = records.load_results([one, two], [], notes, manifests)
    assert len(frame) == 2 * len(list((REAL / "latest").glob("*.json")))
    assert _cell(frame, "resnet_bs1_eager_float32")["processes"] == 4
    assert _cell(frame, "resnet_bs1_default_float32")["processes"] == 2
    assert len(set(frame["run_id"])) == 2 and set(frame["machine"]) == {
        "vm/GPU-26375561-83e5-c7eb-94d4-acd137db3286", "vm-b/GPU-bbbb"}
    assert any(note.startswith("Runs acc@") and "count together" in note for note in notes), notes
    out = tmp_path / "report"
    result = CliRunner().invoke(main, ["report", str(one), str(two), "--out", str(out), "--format", "md,csv"])
    assert result.exit_code == 0, result.output
    assert len((out / "results.csv").read_text().splitlines()) == len(frame) + 1
    assert "count together" in (out / "report.md").read_text()


def test_the_same_measurement_reached_twice_counts_once_and_says_so(tmp_path):
    one = copy_run(tmp_path / "a" / "acc")
    copy = copy_run(tmp_path / "backup" / "acc")
    notes = []
    frame = records.load_results([one, copy], [], notes, records.manifests_by_folder([one, copy]))
    assert len(frame) == len(list((REAL / "latest").glob("*.json")))
    assert _cell(frame, "resnet_bs1_eager_float32")["processes"] == 2
    assert sum("reached twice" in note and "counted once" in note for note in notes) == len(frame)


def test_a_copy_of_a_run_folder_without_its_run_json_counts_once(tmp_path):
    """The run's identity came from run.json, so a copy without it (under any name) was another run whose
    byte-identical records counted again and narrowed every interval."""
    one = copy_run(tmp_path / "a" / "acc")
    copy = Path(shutil.copytree(one, tmp_path / "backup" / "acc-copy"))
    (copy / "run.json").unlink()
    notes = []
    frame = records.load_results([copy, one], [], notes, records.manifests_by_folder([copy, one]))
    count = len(list((REAL / "latest").glob("*.json")))
    assert len(frame) == count
    assert _cell(frame, "resnet_bs1_eager_float32")["processes"] == 2
    assert all(run_id.startswith("acc@") for run_id in frame["run_id"])   # the copy with run.json kept
    assert sum("reached twice" in note and "acc-copy" in note for note in notes) == count
    assert not any("count together" in note for note in notes), notes
    out = tmp_path / "report"
    result = CliRunner().invoke(main, ["report", str(one), str(copy), "--out", str(out), "--format", "csv"])
    assert result.exit_code == 0, result.output
    assert len((out / "results.csv").read_text().splitlines()) == count + 1


def test_two_runs_with_other_settings_are_rows_of_their_own(tmp_path):
    one = copy_run(tmp_path / "a" / "acc")
    two = copy_run(tmp_path / "b" / "acc", hostname="vm-b", gpu_uuid="GPU-bbbb", shift_s=3)
    for path in (two / "latest").glob("*.json"):
        edit(path, lambda data: data["settings"].update(iterations=100))
    notes = []
    frame = records.load_results([one, two], [], notes, records.manifests_by_folder([one, two]))
    rows = [row for row in CellIndex(frame).rows if row["cell_id"] == "resnet_bs1_eager_float32"]
    assert sorted(row["processes"] for row in rows) == [2, 2]
    assert {row["settings_label"] for row in rows} == {"iterations 300, warmup 10, accuracy_tolerance 0.01",
                                                       "iterations 100, warmup 10, accuracy_tolerance 0.01"}
    assert any("with other settings" in note and "a row of their own" in note for note in notes)


def test_a_cell_measured_with_other_settings_is_judged_against_the_eager_row_of_its_own_settings(tmp_path):
    """Two runs of every cell, the second at other iterations and with eager 5x slower: each compiled row's
    speed-up (and every other comparison) takes the eager row measured with its settings, never the other run's
    (the audit's +809.8% for a cell whose own records give +68.9%)."""
    one = copy_run(tmp_path / "a" / "acc")
    two = copy_run(tmp_path / "b" / "acc", hostname="vm-b", gpu_uuid="GPU-bbbb", shift_s=3)
    for path in (two / "latest").glob("*.json"):
        def slower(data):
            data["settings"].update(iterations=100)
            if data["cell"]["mode"] == "eager":
                data["timing"]["mean_ms"] *= 5
        edit(path, slower)
    frame = records.load_results([one, two], [], [], records.manifests_by_folder([one, two]))
    cells = CellIndex(frame)
    compiled = [row for row in cells.rows if row["cell.mode"] != "eager" and row["settings_label"]]
    assert len({row["settings_label"] for row in compiled}) == 2
    for row in compiled:
        eager = cells.speedup_baseline(row)
        assert eager is not None and eager["cell.mode"] == "eager"
        assert eager["settings_label"] == row["settings_label"], (row["row_key"], eager["row_key"])


def test_a_speed_up_never_compares_two_torch_versions(tmp_path):
    """A resume after pip install -U torch: the eager cells ran under one torch, the compiled under another.
    Nothing was pooled, so nothing was split, but no speed-up compares the two: each compiled row has none; and
    where the second run split every cell by version, each compiled row takes the eager row of its own torch."""
    one = copy_run(tmp_path / "a" / "acc")
    for path in (one / "latest").glob("*_eager_*.json"):
        edit(path, lambda data: data["environment"].update(torch="2.9.1+cpu"))
    cells = CellIndex(records.load_results([one], [], [], records.manifests_by_folder([one])))
    compiled = [row for row in cells.rows if row["cell.mode"] != "eager"]
    assert compiled and all(cells.speedup_baseline(row) is None for row in compiled)

    two = copy_run(tmp_path / "b" / "acc", hostname="vm-b", gpu_uuid="GPU-bbbb", shift_s=3)
    for path in (two / "latest").glob("*.json"):
        edit(path, lambda data: data["environment"].update(torch="2.9.1+cpu"))
    fresh = copy_run(tmp_path / "c" / "acc")
    cells = CellIndex(records.load_results([fresh, two], [], [], records.manifests_by_folder([fresh, two])))
    compiled = [row for row in cells.rows if row["cell.mode"] != "eager"]
    real_torch = read_record(A_RECORD)["environment"]["torch"]
    assert {row["environment.torch"] for row in compiled} == {"2.9.1+cpu", real_torch}
    for row in compiled:
        eager = cells.speedup_baseline(row)
        assert eager is not None and eager["environment.torch"] == row["environment.torch"], row["row_key"]


def test_the_host_notes_name_a_kept_apart_row_with_its_label(tmp_path):
    from matrixbench.report.host_notes import _label

    row = {"image": "latest", "cell.model": "resnet", "cell.batch_size": 1, "cell.mode": "default",
           "settings_label": "torch 2.9.1+cpu"}
    assert _label(row) == "latest: resnet bs1 default [torch 2.9.1+cpu]"
    assert _label({**row, "settings_label": None}) == "latest: resnet bs1 default"


def test_a_newer_schema_record_beside_good_ones_refuses_the_report_exit_6(tmp_path):
    run = copy_run(tmp_path / "r" / "acc")
    edit(run / "latest" / "resnet_bs1_eager_float32.json", lambda data: data.update(schema_version=SCHEMA_VERSION + 1))
    result = CliRunner().invoke(main, ["report", str(run), "--out", str(tmp_path / "out"), "--format", "csv"])
    assert result.exit_code == 6, result.output
    assert "resnet_bs1_eager_float32.json: schema_version" in result.output and "newer" in result.output


# --- the report written whole -------------------------------------------------------------------

def _snapshot(folder):
    return {str(path.relative_to(folder)): path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()}


KILLER = """
import os, signal, sys
sys.path.insert(0, {root!r})
from matrixbench.report import records
real = records.write_merged
def write_then_die(*args, **kwargs):
    real(*args, **kwargs)
    os.kill(os.getpid(), signal.SIGKILL)   # mid-report: report.md and the charts written, the CSVs half
records.write_merged = write_then_die
from matrixbench.cli import main
sys.argv = ["matrixbench", "report", {run!r}, "--out", {out!r}]
main()
"""


def test_kill_9_during_report_leaves_the_previous_report_intact(tmp_path):
    run = copy_run(tmp_path / "r" / "acc")
    out = tmp_path / "report"
    first = CliRunner().invoke(main, ["report", str(run), "--out", str(out)])
    assert first.exit_code == 0, first.output
    before = _snapshot(out)
    assert "report.md" in before and "comparisons.csv" in before
    edit(run / "run.json", lambda data: data.update(note="a second report"))
    env = dict(os.environ, PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1")
    done = subprocess.run([sys.executable, "-c", KILLER.format(root=str(ROOT), run=str(run), out=str(out))],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == -9, done.stderr
    assert _snapshot(out) == before
    again = CliRunner().invoke(main, ["report", str(run), "--out", str(out)])
    assert again.exit_code == 0 and "a second report" in (out / "report.md").read_text()
    assert not [path for path in tmp_path.iterdir() if ".report-" in path.name]   # the killed stage removed


def test_a_failure_while_writing_leaves_the_old_report_and_names_path_file_system_and_free_space(
        tmp_path, monkeypatch):
    import errno

    from matrixbench.report import cost_tables

    run = copy_run(tmp_path / "r" / "acc")
    out = tmp_path / "report"
    assert CliRunner().invoke(main, ["report", str(run), "--out", str(out)]).exit_code == 0
    before = _snapshot(out)

    def full(cells, prices, folder):
        raise OSError(errno.ENOSPC, "No space left on device", str(Path(folder) / "costs.csv"))

    monkeypatch.setattr("matrixbench.report.write_costs", full)
    assert cost_tables is not None
    result = CliRunner().invoke(main, ["report", str(run), "--out", str(out)])
    assert result.exit_code == 9, result.output
    line = result.output
    assert f"{out / 'costs.csv'}: No space left on device (file system " in line and "bytes free" in line
    assert f"{out} holds the previous report as it was" in line
    assert _snapshot(out) == before


def test_a_report_into_a_folder_of_yours_keeps_your_files(tmp_path):
    run = copy_run(tmp_path / "r" / "acc")
    out = tmp_path / "work"
    out.mkdir()
    (out / "mine.txt").write_text("keep me")
    assert CliRunner().invoke(main, ["report", str(run), "--out", str(out), "--format", "csv"]).exit_code == 0
    assert (out / "mine.txt").read_text() == "keep me" and (out / "results.csv").is_file()
    assert CliRunner().invoke(main, ["report", str(run), "--out", str(out), "--format", "md"]).exit_code == 0
    assert (out / "mine.txt").read_text() == "keep me" and (out / "report.md").is_file()
    assert not (out / "results.csv").exists()   # the old report's CSV is no part of this report


# --- secrets by value ---------------------------------------------------------------------------

def test_secret_values_are_hidden_from_run_json_and_the_console(tmp_path, monkeypatch):
    _small(tmp_path, monkeypatch)
    monkeypatch.setenv("HF_TOKEN", "hf_typed_into_the_note")
    monkeypatch.setenv("GH_PAT", "ghp_personal_access")
    monkeypatch.setenv("MY_PASS", "hunter2hunter2")
    note = ("token hf_typed_into_the_note, pat ghp_personal_access, pass hunter2hunter2, "
            "index https://me:pa'ss@pypi.example/simple and https://pypi.example/simple?token=q1w2e3r4&x=1")
    result = CliRunner().invoke(main, ["run", "--matrix", "m.yaml", "--backend", "local", "--images", "stable",
                                       "--note", note])
    assert result.exit_code == 0, result.output
    text = (tmp_path / "results" / "default" / "run.json").read_text()
    for secret in ("hf_typed_into_the_note", "ghp_personal_access", "hunter2hunter2", "pa'ss", "q1w2e3r4"):
        assert secret not in text and secret not in result.output, secret
    stored = json.loads(text)["note"]
    assert "https://***@pypi.example/simple" in stored and "?token=***&x=1" in stored


@pytest.mark.parametrize("text, shown", [
    ("pip install --index-url https://user:it's@host/simple torch",
     "pip install --index-url https://***@host/simple torch"),
    ("'https://user:pw@host/simple'", "'https://***@host/simple'"),
    ("https://host/f?access_token=abcd&sig=zzzz&plain=1", "https://host/f?access_token=***&sig=***&plain=1"),
    ("PATH=/usr/bin COMPASS=north", "PATH=/usr/bin COMPASS=north"),
])
def test_urls_are_parsed_not_pattern_matched(text, shown):
    from matrixbench.redact import redact_text

    assert redact_text(text) == shown


# --- the hostile folder: every field of a real record and run.json ---------------------------------

def _leaves(data, prefix=()):
    for key, value in data.items():
        if isinstance(value, dict) and value:
            yield from _leaves(value, prefix + (key,))
        else:
            yield prefix + (key,)


MUTATIONS = {
    "text": lambda value: "x" if not isinstance(value, str) else 12345,
    "nan": lambda value: float("nan"),
    "inf": lambda value: float("inf"),
    "negative": lambda value: -1,
    "huge": lambda value: 1e308 if not isinstance(value, str) else "x" * 100_000,
    "list": lambda value: [value, value],
    "missing": None,
}


def _mutated(data, keys, how):
    data = json.loads(json.dumps(data))
    target = data
    for key in keys[:-1]:
        target = target[key]
    if how == "missing":
        del target[keys[-1]]
    else:
        target[keys[-1]] = MUTATIONS[how](target[keys[-1]])
    return data


def _measurement_is_sound(frame):
    """What the statistics read: every ok row's mean and samples finite and positive, every duration finite."""
    for row in CellIndex(frame).rows:
        assert row["duration_s"] is None or (math.isfinite(row["duration_s"]) and row["duration_s"] >= 0)
        for mean in row["process_means"]:
            assert isinstance(mean, float) and math.isfinite(mean) and mean > 0
        for samples in row["process_samples"]:
            assert all(math.isfinite(value) and value >= 0 for value in samples)


# fields the statistics, the identity and the merge read: these mutations go through the report's reader too
READ_BY_STATISTICS = {("timing", "mean_ms"), ("timing", "samples_ms"), ("timing", "first_call_s"), ("timing", "noisy"),
                      ("duration_s",), ("repeat",), ("status",), ("started_at",), ("cell", "batch_size"), ("cell_id",),
                      ("settings", "iterations"), ("device",), ("environment", "hostname")}


def test_every_field_of_a_real_record_mutated_is_vouched_for_or_named(tmp_path):
    """No traceback; a record the reader refuses is a line naming the file (left out, as the report lists it);
    one it accepts feeds the statistics only finite, positive numbers."""
    original = json.loads(A_RECORD.read_text())
    original["timing"]["samples_ms"] = original["timing"]["samples_ms"][:8]   # the same fields, read faster
    run = tmp_path / "r" / "acc"
    (run / "latest").mkdir(parents=True)
    shutil.copy(REAL / "run.json", run / "run.json")
    other = json.loads((REAL / "latest" / "resnet_bs1_default_float32.json").read_text())
    other["timing"]["samples_ms"] = other["timing"]["samples_ms"][:8]
    (run / "latest" / "resnet_bs1_default_float32.json").write_text(json.dumps(other))
    path = run / "latest" / "resnet_bs1_eager_float32.json"
    manifests = records.manifests_by_folder([run])
    refused = accepted = 0
    for keys in _leaves(original):
        for how in MUTATIONS:
            path.write_text(json.dumps(_mutated(original, keys, how)))
            try:
                record = read_record(path, run)   # the one reader the planner, the bill and the report use
            except Unvouched as exc:
                refused += 1
                assert exc.line().startswith(f"{path}: ") and "Traceback" not in exc.line(), (keys, how)
                if keys in READ_BY_STATISTICS:   # and the report leaves it out, naming it
                    unreadable = []
                    records.load_results([run], unreadable, [], manifests)
                    assert len(unreadable) == 1 and unreadable[0].startswith(f"{path}: "), (keys, how)
                continue
            accepted += 1
            assert math.isfinite(record["duration_s"]) and record["duration_s"] >= 0
            if keys in READ_BY_STATISTICS:
                _measurement_is_sound(records.load_results([run], [], [], manifests))
    assert refused > 100 and accepted > 50


@pytest.mark.parametrize("keys, how", [
    (("duration_s",), "nan"), (("timing", "mean_ms"), "negative"), (("timing", "samples_ms"), "text"),
    (("cell",), "text"), (("status",), "missing"), (("repeat",), "huge"), (("environment", "hostname"), "list"),
])
def test_a_mutated_record_through_the_report_command_is_one_named_line(tmp_path, keys, how,
                                                                      charts_drawn_not_rendered):
    original = json.loads(A_RECORD.read_text())
    run = copy_run(tmp_path / "r" / "acc")
    path = run / "latest" / "resnet_bs1_eager_float32.json"
    path.write_text(json.dumps(_mutated(original, keys, how)))
    result = CliRunner().invoke(main, ["report", str(run), "--out", str(tmp_path / "out"), "--format", "md,csv"])
    assert result.exit_code == 0 and "Traceback" not in result.output, result.output
    assert f"warning: {path}: " in result.output and "left out of the report" in result.output
    assert str(path) in (tmp_path / "out" / "report.md").read_text()


def _manifest_leaves(manifest):
    keys = [(key,) for key in manifest]
    keys += [("matrix", key) for key in manifest["matrix"]]
    return keys


def _use_manifests(run):
    """Every reader of run.json the report and run have."""
    from matrixbench.report import merged_prices, shares
    from matrixbench.run.manifest import unfinished_runs

    manifests = records.read_manifests([run])
    records.run_notes(manifests), records.image_order(manifests), records.aa_twins(manifests)
    records.margin_pct(manifests), records.published_overrides(manifests), shares.plan_of(manifests)
    merged_prices(manifests), unfinished_runs([run])
    records.run_identity(run, manifests[0])


def test_every_field_of_a_real_run_json_mutated_is_read_or_refused_exit_8(tmp_path):
    original = json.loads((REAL / "run.json").read_text())
    original["matrix"].update(prices={"H100": {"usd_per_hour": 2.5, "looked_up": "2026-11-01", "source": None}},
                              bridges=[{"torch_of": "a", "transformers_of": "b", "name": "c"}])
    run = tmp_path / "r" / "acc"
    run.mkdir(parents=True)
    refused = 0
    for keys in _manifest_leaves(original):
        for how in MUTATIONS:
            (run / "run.json").write_text(json.dumps(_mutated(original, keys, how)))
            try:
                _use_manifests(run)
            except ManifestError as exc:
                refused += 1
                assert str(run / "run.json") in str(exc) and exc.exit_code == 8, (keys, how, exc)
    assert refused > 40


@pytest.mark.parametrize("change", [
    lambda m: m.update(matrix="a string"), lambda m: m.update(matrix=[1, 2]),
    lambda m: m["matrix"].update(prices={"H100": {"usd_per_hour": "two", "looked_up": "x"}}),
    lambda m: m["matrix"].update(bridges=[{"name": "x"}]), lambda m: m["matrix"].update(margin_pct=float("nan")),
    lambda m: m.update(aa_twins=["x"]), lambda m: m.update(images="latest"),
])
def test_a_hand_edited_run_json_is_exit_8_naming_the_file_in_report_and_run(tmp_path, monkeypatch, change):
    run = copy_run(tmp_path / "r" / "acc")
    edit(run / "run.json", change)
    result = CliRunner().invoke(main, ["report", str(run), "--out", str(tmp_path / "out"), "--format", "csv"])
    assert result.exit_code == 8 and "Traceback" not in result.output, result.output
    assert f"{run / 'run.json'}: field " in result.output


def test_an_unreadable_run_json_gives_each_command_its_own_fix(tmp_path):
    """The audit: `report` said "use another --run name", an option it does not have."""
    run = copy_run(tmp_path / "results" / "acc")
    (run / "run.json").write_text("{broken")
    report = CliRunner().invoke(main, ["report", str(run), "--out", str(tmp_path / "out"), "--format", "csv"])
    assert report.exit_code == 8 and f"error: {run / 'run.json'}: not a readable run.json" in report.output
    assert "--run" not in report.output and "move it aside (the records stay and are reported) or leave its run's " \
        "folder out of the report" in report.output
    ran = CliRunner().invoke(main, ["run", "--matrix", str(ROOT / "matrix-cpu-smoke.yaml"), "--backend", "local",
                                    "--device", "cpu", "--images", "latest", "--results", str(tmp_path / "results"),
                                    "--run", "acc", "--dry-run"])
    assert ran.exit_code == 8 and ran.output.rstrip().endswith("move it aside or use another --run name"), ran.output


# --- smaller items --------------------------------------------------------------------------------

@pytest.mark.parametrize("budget", ["nan", "inf", "-inf", "1e400", "0", "soon"])
def test_a_budget_that_is_no_finite_positive_number_is_refused(tmp_path, monkeypatch, budget):
    _small(tmp_path, monkeypatch)
    result = CliRunner().invoke(main, ["run", "--matrix", "m.yaml", "--backend", "local", "--images", "stable",
                                       "--budget", budget, "--dry-run"])
    assert result.exit_code == 2 and "--budget" in result.output and "Traceback" not in result.output, result.output
    assert not (tmp_path / "results" / "default" / "run.json").exists()


@pytest.mark.parametrize("text", ["AUTO", "Auto", " auto"])
def test_repeats_auto_in_any_case_is_auto(tmp_path, monkeypatch, text):
    _small(tmp_path, monkeypatch)
    result = CliRunner().invoke(main, ["run", "--matrix", "m.yaml", "--backend", "local", "--images", "stable",
                                       "--repeats", text, "--dry-run"])
    assert result.exit_code == 0 and "invalid literal" not in result.output, result.output


def test_repeats_neither_integer_nor_auto_is_one_line():
    result = CliRunner().invoke(main, ["validate", "--repeats", "many"])
    assert result.exit_code == 2 and "'many' is neither an integer nor 'auto'" in result.output
    assert "invalid literal" not in result.output


def test_a_runner_traceback_reaches_the_console_as_one_line_and_the_logs_path(tmp_path):
    from types import SimpleNamespace

    from matrixbench.run.launch import LaunchStatus, Outcome

    tail = ("Traceback (most recent call last):\n  File \"runner/core.py\", line 1, in <module>\n    boom()\n"
            "RuntimeError: CUDA error: an illegal memory access was encountered\n")
    request = SimpleNamespace(repeats=lambda: [1, 2], image=SimpleNamespace(name="latest"),
                              work_dir=lambda: tmp_path / "latest")
    missing = (SimpleNamespace(id="resnet-50/default/bs1/r2"),)
    line = Outcome(LaunchStatus.INCOMPLETE, 139, missing, tail).describe(request)
    assert "\n" not in line and "Traceback" not in line and "File " not in line
    assert "1 of 2 do; without a record: resnet-50/default/bs1/r2;" in line
    assert "its last log line: RuntimeError: CUDA error: an illegal memory access" in line
    assert f"its log: {tmp_path / 'latest' / 'runner.log'}" in line


def test_an_images_env_secret_typed_into_the_note_is_hidden(tmp_path, monkeypatch):
    import yaml

    monkeypatch.chdir(tmp_path)
    data = small_matrix_data()
    data["images"]["stable"]["env"] = {"INDEX_PASSWORD": "s3cr3t-of-the-image"}
    (tmp_path / "m.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    use_backend(monkeypatch, RecordingBackend(gpus=False))
    result = CliRunner().invoke(main, ["run", "--matrix", "m.yaml", "--backend", "local", "--images", "stable",
                                       "--note", "tried s3cr3t-of-the-image"])
    assert result.exit_code == 0, result.output
    text = (tmp_path / "results" / "default" / "run.json").read_text()
    assert "s3cr3t-of-the-image" not in text and json.loads(text)["note"] == "tried ***"


def test_a_folder_given_twice_is_read_once_with_its_selftest_and_status_said_once(tmp_path):
    run = copy_run(tmp_path / "r" / "acc")
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["report", str(run), str(run), "--out", str(out), "--format", "md,csv"])
    assert result.exit_code == 0, result.output
    assert len((out / "results.csv").read_text().splitlines()) == len(list((REAL / "latest").glob("*.json"))) + 1
    assert (out / "report.md").read_text().count("Selftest of the measuring apparatus") == 1
    assert result.output.count("the run is interrupted") == 1


def test_the_working_directory_is_no_secret_though_its_key_says_pwd(tmp_path, monkeypatch):
    """PWD matched the secret words (as DB_PWD does): every error line naming a file under the working
    directory showed `***/results` instead of the path."""
    from matrixbench.redact import redact_text

    monkeypatch.setenv("PWD", str(tmp_path))
    monkeypatch.setenv("OLDPWD", str(tmp_path.parent))
    monkeypatch.setenv("DB_PWD", "s3cret-db-password")
    line = f"--results: cannot make {tmp_path / 'results'}: permission denied (DB_PWD=s3cret-db-password)"
    assert redact_text(line) == f"--results: cannot make {tmp_path / 'results'}: permission denied (DB_PWD=***)"
