"""The slots' interference calibration (--calibrate, issue 15): each calibration cell on every slot alone,
then on every slot at once; its records apart from the matrix's; the report's loaded / alone table.

The table's records are built by the runner's own record builder (host_helpers.synthetic_record) with
SYNTHETIC latencies: nothing in the arithmetic tests was measured.
"""
import json
import os
from pathlib import Path

import numpy as np
import pytest

from host_helpers import (
    ConcurrentRecordingBackend,
    RecordingBackend,
    local_run_options,
    synthetic_record,
    use_backend,
    write_matrix,
)
from matrixbench.errors import MatrixError
from matrixbench.executors import calibration as calibrate
from matrixbench.matrix import Overrides, load_matrix
from matrixbench.report import build_report, records, verdicts
from matrixbench.report.calibration import calibration_tables
from matrixbench.run.command import run_matrix
from matrixbench.run.placement import Slot
from runner.cells_file import cells_file_from_dict
from runner.core import Status
from runner.records import CALIBRATION_ENV, calibration
from runner.schema import read_record
from runner.timing import summarize

PROJECT_ROOT = Path(__file__).resolve().parents[1]
TWO_CORES = len(os.sched_getaffinity(0)) >= 2
SLOTS = (Slot(0, (0,)), Slot(1, (1,)))


def test_the_calibration_cells_are_each_model_at_batch_1_eager_and_default(tmp_path):
    matrix = load_matrix(write_matrix(tmp_path), Overrides(calibrate=True))
    cells = calibrate.calibration_cells(matrix)
    assert [(c.model, c.model_id, c.batch_size, c.mode) for c in cells] == [
        ("resnet", "microsoft/resnet-50", 1, "eager"), ("resnet", "microsoft/resnet-50", 1, "default")]
    tiny = load_matrix(PROJECT_ROOT / "matrix-cpu-smoke.yaml", Overrides(calibration_models=["vit", "resnet"]))
    assert [(c.model, c.size, c.mode) for c in calibrate.calibration_cells(tiny)] == [
        ("vit", "tiny", "eager"), ("vit", "tiny", "default"),
        ("resnet", "tiny", "eager"), ("resnet", "tiny", "default")]
    with pytest.raises(MatrixError, match="unknown model 'nope'.*valid:.*resnet"):
        calibrate.calibration_cells(load_matrix(write_matrix(tmp_path), Overrides(calibration_models=["nope"])))


def test_calibrate_is_a_setting_of_the_matrix_and_its_flag(tmp_path):
    assert load_matrix(write_matrix(tmp_path)).calibrate is False
    from click.testing import CliRunner

    from matrixbench.cli import main, run
    result = CliRunner().invoke(main, ["run", "--help"])
    # --calibration-models is a rare flag: accepted, out of the help, its key listed under --set
    assert "--calibrate" in result.output and "calibration_models" in result.output
    assert "--calibration-models" in [opt for param in run.params for opt in param.opts]


def test_the_runner_takes_the_phase_from_the_host():
    assert calibration({CALIBRATION_ENV: json.dumps({"phase": "loaded", "slots": 2})}) == {"phase": "loaded",
                                                                                            "slots": 2}
    assert calibration({}) is None


@pytest.mark.skipif(not TWO_CORES, reason="needs 2 usable cores")
def test_each_slot_runs_alone_then_all_at_once_round_by_round_apart_from_the_matrix(tmp_path, monkeypatch):
    backend = use_backend(monkeypatch, ConcurrentRecordingBackend())
    matrix = load_matrix(write_matrix(tmp_path), Overrides(slots=2, calibrate=True, repeats=2, models=["vit"],
                                                           batch_sizes=[1], calibration_models=["vit"],
                                                           exclusive_timing=True))
    summary = run_matrix(matrix, local_run_options(tmp_path))
    calibration_runs = [(r, now) for r, _thread, now in backend.started if r.placement.calibration is not None]
    # two rounds, each: slot 0 alone, slot 1 alone, then both at once
    seen = [(r.work.schedule[0][1], r.placement.calibration["phase"], r.placement.slot.index)
            for r, _ in calibration_runs]
    for index in (0, 1):
        this_round = seen[4 * index:4 * index + 4]
        assert this_round[:2] == [(index, "alone", 0), (index, "alone", 1)]
        assert sorted(this_round[2:]) == [(index, "loaded", 0), (index, "loaded", 1)]   # at once: any order
    for request, now in calibration_runs:
        alone = request.placement.calibration["phase"] == "alone"
        assert request.placement.busy_units == (1 if alone else 2) and request.placement.calibration["slots"] == 2
        assert now == 1 or not alone                                  # alone: nothing else ran
        assert request.paths.out_dir == tmp_path / "results" / "r1" / "stable" / "calibration" / \
            request.placement.calibration["phase"] / f"slot-{request.placement.slot.index}"
        slot = request.placement.slot.index
        assert request.paths.cache_dir == tmp_path / "cache" / "stable" / "calibration" / f"slot-{slot}"
        assert [c.mode for c in request.work.cells] == ["eager", "default"] and request.image.name == "stable"
        assert json.loads(request.placement.slot_env()[CALIBRATION_ENV]) == request.placement.calibration
        # a timing board of its own, never exclusive (--exclusive-timing is for the matrix's cells)
        assert request.placement.timing_board is not None and request.placement.exclusive_timing is False
    assert max(now for r, now in calibration_runs if r.placement.calibration["phase"] == "loaded") == 2
    # the matrix ran every one of its own cells, though the calibration has records of the same cells
    assert summary.statuses() == {"ok": 8}
    image_dir = tmp_path / "results" / "r1" / "stable"
    assert all((image_dir / name).exists() for name in ("vit_bs1_eager_float32.json", "vit_bs1_eager_float32.r1.json"))
    # resume: nothing left of either
    backend.started.clear()
    run_matrix(matrix, local_run_options(tmp_path))
    assert backend.started == []


def test_a_round_missing_one_record_reruns_whole(tmp_path, monkeypatch):
    backend = use_backend(monkeypatch, RecordingBackend())
    matrix = load_matrix(write_matrix(tmp_path), Overrides(calibrate=True, repeats=2, models=["vit"]))
    base_dir = tmp_path / "image"
    cells = calibrate.calibration_cells(matrix)
    assert calibrate.pending_rounds(base_dir, cells, SLOTS, 2) == [0, 1]
    calibrate.run_calibration(_run(tmp_path, matrix, backend), _base(base_dir), SLOTS)
    assert calibrate.pending_rounds(base_dir, cells, SLOTS, 2) == []
    assert all(request.paths.cache_dir is None for request in backend.requests)        # --cold stays cold
    (calibrate.out_dir(base_dir, "loaded", SLOTS[1]) / "resnet_bs1_default_float32.r1.json").unlink()
    assert calibrate.pending_rounds(base_dir, cells, SLOTS, 2) == [1]
    assert calibrate.pending_rounds(base_dir, cells, SLOTS, 2, force=True) == [0, 1]


def test_one_slot_has_nothing_to_calibrate(tmp_path):
    run = _run(tmp_path, load_matrix(write_matrix(tmp_path)), RecordingBackend())
    done = calibrate.run_calibration(run, _base(tmp_path / "image"), SLOTS[:1])
    assert done == {"rounds": [], "missing": []} and "nothing to calibrate" in run.progress.notes[0]


def test_the_phases_are_units_of_the_slots_scheduler_pinned_to_their_slots(tmp_path, monkeypatch):
    """No loop or threads of the calibration's own: every runner starts from ``scheduler.run_on_slots``,
    per round each slot's alone unit by itself, then one loaded unit per slot in one call."""
    from matrixbench.executors import scheduler

    calls, real = [], scheduler.run_on_slots

    def recording(slots, units, run_unit, stop_all):
        calls.append([(unit.name, unit.slot, unit.parts[0][0].index) for unit in units])
        return real(slots, units, run_unit, stop_all)

    monkeypatch.setattr(calibrate, "run_on_slots", recording)
    backend = RecordingBackend()
    matrix = load_matrix(write_matrix(tmp_path), Overrides(calibrate=True, repeats=2, models=["vit"]))
    done = calibrate.run_calibration(_run(tmp_path, matrix, backend), _base(tmp_path / "image"), SLOTS)
    assert done["rounds"] == [0, 1] and done["missing"] == []
    assert calls == [call for index in (0, 1) for call in (
        [("calibration alone bs=1", 0, index)], [("calibration alone bs=1", 1, index)],
        [("calibration loaded bs=1", 0, index), ("calibration loaded bs=1", 1, index)])]
    assert len(backend.requests) == 2 * 4    # every runner of it went through those calls


def test_a_pinned_unit_runs_only_on_its_slot():
    from matrixbench.executors.scheduler import Unit, run_on_slots

    units = [Unit("a", 1, [], 0.0, slot=1), Unit("b", 1, [], 0.0, slot=0), Unit("c", 1, [], 0.0, slot=1)]
    ran = []
    run_on_slots(SLOTS, units, lambda slot, unit, busy: ran.append((slot.index, unit.model)), lambda: None)
    assert sorted(ran) == [(0, "b"), (1, "a"), (1, "c")]


def _base(out_dir):
    from matrixbench.environments.base import ImageRef, Paths, RunRequest, Work
    return RunRequest(ImageRef("stable"), Work([], {"iterations": 5}), Paths(out_dir))


def _run(tmp_path, matrix, backend):
    """A Run of ``matrix`` with no image work of its own (the calibration's base request is given)."""
    from host_helpers import Notes
    from matrixbench.executors.base import Run
    return Run(matrix, local_run_options(tmp_path), backend, tmp_path / "results" / "r1", False, {}, [], Notes())


# ---- the report's table, from synthetic records -------------------------------------------------

def _record(phase, slot, repeat, mean, mode="eager", status=Status.OK):
    cell = {"model": "resnet", "task": "image-classification", "weights": "random", "size": "full",
            "batch_size": 1, "mode": mode, "fullgraph": False, "dtype": "float32", "attention": "eager"}
    plan = cells_file_from_dict({"settings": {"iterations": 50}, "image_name": "latest", "cells": [cell]})
    environment = {"python": "3.12", "torch": "2.13.0", "torch_git": None, "transformers": "5.23.0", "cuda": None,
                   "cudnn": None, "gpu_name": None, "gpu_count": 0, "driver": None, "cpu_model": "SYNTHETIC CPU",
                   "threads": 1, "platform": "SYNTHETIC", "hostname": "synthetic", "image_name": "latest",
                   "image_id": None}
    record = synthetic_record(plan, "cpu", environment)
    noise = np.random.default_rng(slot * 10 + repeat).standard_normal(50)
    samples = [float(v) for v in mean * (1 + 0.01 * (noise - noise.mean()) / noise.std(ddof=1))]
    record.status, record.duration_s, record.repeat = status, 1.0, repeat
    record.memory = {"peak_bytes": 1, "kind": "cpu_max_rss"}
    record.accuracy = {"max_abs_diff": None, "tolerance": None, "status": "skipped" if mode == "eager" else "pass"}
    record.timing = {"load_s": 1.0, "first_call_s": 1.0, "warmup_s": 1.0, "timer": "perf_counter",
                     **summarize(samples, 0.1)} if status == Status.OK else None
    record.placement = {"slot": slot, "cores": [slot], "gpu_index": None, "gpu_uuid": None, "numa_node": None,
                        "slots": 2, "busy_units": 1 if phase == "alone" else 2, "affinity": [slot],
                        "busy_slots": 0 if phase == "alone" else 1 - (slot == 1 and repeat == 1)}
    record.calibration = {"phase": phase, "slots": 2}
    return record.to_dict()


def _write(run, data):
    folder = run / "latest" / "calibration" / data["calibration"]["phase"] / f"slot-{data['placement']['slot']}"
    folder.mkdir(parents=True, exist_ok=True)
    suffix = f".r{data['repeat']}" if data["repeat"] else ""
    (folder / f"{data['cell_id']}{suffix}.json").write_text(json.dumps(data))


# (phase, mode) -> process means by (slot, round): loaded eager is 20% slower, default the same
MEANS = {("alone", "eager"): 10.0, ("loaded", "eager"): 12.0, ("alone", "default"): 8.0, ("loaded", "default"): 8.0}


@pytest.fixture(scope="module")
def calibration_run(tmp_path_factory):
    run = tmp_path_factory.mktemp("calibrated") / "run1"
    for (phase, mode), mean in MEANS.items():
        for slot in (0, 1):
            for repeat in (0, 1):
                _write(run, _record(phase, slot, repeat, mean * (1 + 0.02 * (slot - repeat)), mode))
    matrix_record = _record("alone", 0, 0, 99.0)
    del matrix_record["calibration"]                   # the matrix's own record of the same cell
    (run / "latest" / f"{matrix_record['cell_id']}.json").write_text(json.dumps(matrix_record))
    (run / "run.json").write_text(json.dumps({"schema_version": 1, "images": ["latest"]}))
    return run


def test_calibration_records_keep_their_phase_and_slot_apart_from_the_matrix(calibration_run):
    frame = records.load_results([calibration_run])
    assert len(frame) == 17                                           # 16 calibration processes + 1
    assert set(frame["run"]) == {"run1"}                              # run folder found above calibration/
    matrix, calibration_frame = records.split_calibration(frame)
    assert len(matrix) == 1 and matrix["timing.mean_ms"].iloc[0] == pytest.approx(99.0)
    assert sorted(calibration_frame.groupby(["calibration.phase", "placement.slot"]).size()) == [4, 4, 4, 4]


def test_the_table_gives_loaded_over_alone_with_its_interval(calibration_run):
    _, calibration_frame = records.split_calibration(records.load_results([calibration_run]))
    (table,) = calibration_tables(calibration_frame)
    assert table.title == "CPU (SYNTHETIC CPU) · latest (torch 2.13.0)"
    rows = {row[2].text: {header: cell.text for header, cell in zip(table.header, row)} for row in table.rows}
    assert list(rows) == ["eager", "default"]
    eager, default = rows["eager"], rows["default"]
    assert eager["loaded / alone"] == "1.200×*" and eager["processes (alone / loaded)"] == "4 / 4"
    low, high = (float(text.rstrip("×")) for text in eager["95% interval"].strip("[]").split(", "))
    assert low > 1.0 and low < 1.2 < high
    assert default["loaded / alone"].startswith("1.000×") and default["slots"] == "2"
    assert default["loaded / alone"][-1] in "?≈" and default["Verdict"] != "slower"   # no star: the interval holds 1
    assert eager["Verdict"] == "slower"
    assert eager["other slots timing (loaded)"] == "1 ×3, 0 ×1"           # one loaded process timed alone


def test_loaded_over_alone_is_judged_from_process_means_and_one_process_is_not_tested():
    from scipy import stats as scipy_stats

    alone, loaded = {"process_means": [10.1, 9.9]}, {"process_means": [12.0, 12.2, 11.9]}
    found = verdicts.judge_cells(alone, loaded)
    assert found.ratio == pytest.approx(scipy_stats.gmean([12.0, 12.2, 11.9]) / scipy_stats.gmean([10.1, 9.9]))
    # 3 against 2 processes: unequal sides, the smaller under 5, so Hsu's n_small - 1 = 1 degree of freedom
    # (issue 34) around Welch's standard error
    logs_loaded, logs_alone = np.log([12.0, 12.2, 11.9]), np.log([10.1, 9.9])
    centre = logs_loaded.mean() - logs_alone.mean()
    se = np.sqrt(logs_loaded.var(ddof=1) / 3 + logs_alone.var(ddof=1) / 2)
    half = scipy_stats.t.ppf(0.975, 1) * se
    assert (found.low, found.high) == pytest.approx((np.exp(centre - half), np.exp(centre + half)))
    assert found.verdict == "slower"
    assert verdicts.judge_cells({"process_means": [10.0]}, loaded).verdict == "not tested"


def test_the_report_renders_the_calibration_table_and_keeps_it_out_of_the_matrix(calibration_run, tmp_path):
    build_report([calibration_run], tmp_path, ["md", "csv"])
    markdown = (tmp_path / "report.md").read_text(encoding="utf-8")
    section = markdown[markdown.index("## Interference calibration"):markdown.index("## Environment")]
    # each phase's ms: the geometric mean of its process means (stats.cell_estimate), e.g. 10 x (1, .98, 1.02, 1)
    spread = [1 + 0.02 * (slot - repeat) for slot in (0, 1) for repeat in (0, 1)]
    alone, loaded = (float(np.exp(np.mean(np.log([MEANS[(phase, "eager")] * f for f in spread]))))
                     for phase in ("alone", "loaded"))
    assert f"| Image Classification/ResNet | 1 | eager | {alone:.3f} | {loaded:.3f} | 1.200×* |" in section
    assert "1 cell from run1." in markdown                             # the matrix's one record (was "1 cells")
    assert "99.000" in markdown and "12.000" not in markdown.replace(section, "")
    lines = (tmp_path / "results.csv").read_text(encoding="utf-8").splitlines()
    assert len(lines) == 1 + 17 and "calibration.phase" in lines[0]
    import pandas as pd
    derived = pd.read_csv(tmp_path / "comparisons.csv").query("kind == 'interference'")
    assert list(derived["mode"]) == ["eager", "default"] and set(derived["against"]) == {"alone"}
    eager = derived.iloc[0]
    assert eager["estimate_ratio"] == pytest.approx(1.2) and eager["verdict"] == "slower"
    assert eager["baseline_processes"] == eager["candidate_processes"] == 4
    assert eager["low_pct"] > 0


def test_a_calibration_phase_that_failed_shows_its_status(tmp_path):
    run = tmp_path / "run1"
    _write(run, _record("alone", 0, 0, 10.0))
    _write(run, _record("loaded", 0, 0, 10.0, status=Status.OOM))
    _, frame = records.split_calibration(records.load_results([run]))
    (table,) = calibration_tables(frame)
    row = {header: cell.text for header, cell in zip(table.header, table.rows[0])}
    assert row["loaded (ms)"] == "OOM" and "loaded / alone" not in row   # column dropped: nothing to show


@pytest.mark.slow
@pytest.mark.skipif(not TWO_CORES, reason="needs 2 usable cores")
def test_two_slots_calibrate_tiny_resnet_with_the_real_runner(tmp_path, monkeypatch):
    """The real runner, local backend, --slots 2 --calibrate: both phases' records on both slots, each
    with its phase, slot, busy slots and affinity; the report's calibration table renders."""
    from click.testing import CliRunner

    from matrixbench.cli import main

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)
    args = ["run", "--matrix", str(PROJECT_ROOT / "matrix-cpu-smoke.yaml"), "--images", "latest",
            "--models", "resnet", "--modes", "eager", "--repeats", "1", "--iterations", "5", "--warmup", "0",
            "--backend", "local", "--device", "cpu", "--slots", "2", "--calibrate",
            "--cache-dir", str(tmp_path / "cache")]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    image_dir = tmp_path / "results" / "default" / "latest"
    assert read_record(image_dir / "resnet-tiny_bs1_eager_float32.json").get("calibration") is None
    found = {}
    for path in (image_dir / "calibration").glob("*/slot-*/*.json"):
        record = read_record(path)
        block, phase = record["placement"], record["calibration"]["phase"]
        assert record["status"] == "ok" and record["calibration"]["slots"] == 2
        assert path.parent.name == f"slot-{block['slot']}" and path.parent.parent.name == phase
        assert block["affinity"] == block["cores"] == [block["slot"]]
        assert block["busy_units"] == (1 if phase == "alone" else 2)
        assert block["busy_slots"] == 0 or phase == "loaded"                 # the timing board's count
        found.setdefault((phase, block["slot"]), set()).add(record["cell"]["mode"])
    assert found == {(phase, slot): {"eager", "default"} for phase in ("alone", "loaded") for slot in (0, 1)}
    result = CliRunner().invoke(main, ["report", "results/default", "--out", "report", "--format", "md"])
    assert result.exit_code == 0, result.output
    markdown = (tmp_path / "report" / "report.md").read_text(encoding="utf-8")
    section = markdown[markdown.index("## Interference calibration"):markdown.index("## Environment")]
    assert "| Image Classification/ResNet (tiny) | 1 | eager |" in section and "| 2 / 2 | 2 |" in section
    assert "other slots timing (loaded)" in section
