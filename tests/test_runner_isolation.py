"""Cells in fresh processes: failures become statuses, the next cell still runs, resume."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from runner.cells_file import CellsFile
from runner.compile import counts_cudagraph_skips
from runner.driver import PROBE_TIMEOUT_S, run_cells_file
from runner.isolation import Outcome
from runner.schema import SCRATCH_DIRNAME, read_record, record_path
from runner_cells import assert_valid, inject_faults, settings, tiny_cell


def plan(cells, **setting_overrides):
    return CellsFile(settings=settings(**setting_overrides), cells=cells, image_name="test", image_id="sha256:1")


def run(cells, out, **kwargs):
    lines = []
    results = run_cells_file(plan(cells, **kwargs.pop("settings", {})), out, log=lines.append, **kwargs)
    return results, lines


def statuses(out, cells):
    return [read_record(record_path(out, cell))["status"] for cell in cells]


def test_injected_failures_are_statuses_and_the_next_cell_still_runs(tmp_path, monkeypatch):
    cells = [tiny_cell(), tiny_cell(batch_size=2), tiny_cell(batch_size=3), tiny_cell(batch_size=4)]
    inject_faults(monkeypatch, dict(zip(cells, ["oom", "crash", "error"])))
    results, lines = run(cells, tmp_path)
    assert [status for _, status in results] == ["oom", "crashed", "error", "ok"]
    assert statuses(tmp_path, cells) == ["oom", "crashed", "error", "ok"]
    crashed = read_record(record_path(tmp_path, cells[1]))
    assert "SIGSEGV" in crashed["error"]["message"]
    assert crashed["environment"]["torch"] != "unknown" and crashed["environment"]["image_name"] == "test"
    for cell in cells:
        assert_valid(read_record(record_path(tmp_path, cell)))
    assert any("[2/4] resnet-tiny_bs2_eager_float32: crashed" in line for line in lines)


def test_a_cell_over_its_time_limit_is_killed_and_recorded_as_timeout(tmp_path, monkeypatch):
    cell = tiny_cell()
    inject_faults(monkeypatch, {cell: "hang"})
    results, _ = run([cell], tmp_path, settings={"timeout_s": 3})
    record = read_record(record_path(tmp_path, cell))
    assert results == [(record["cell_id"], "timeout")]
    assert 3 <= record["duration_s"] < 60
    assert record["settings"]["timeout_s"] == 3
    assert_valid(record)


class SlowStartLauncher:
    """A launcher whose probe takes 4.7 s (the runner's start on a loaded machine) and whose
    cells hang; it records the time limit each call gets."""

    PROBE_S = 4.7

    def __init__(self):
        self.limits = []

    def start(self):
        pass

    def run(self, function_name, args, timeout_s):
        self.limits.append((function_name, timeout_s))
        if function_name == "probe" and timeout_s > self.PROBE_S:
            return Outcome(exitcode=0, timed_out=False, messages=[{"device": "cpu"}])
        return Outcome(exitcode=None, timed_out=True)


def test_a_short_timeout_limits_the_cell_not_the_runners_start(tmp_path):
    cell, launcher = tiny_cell(), SlowStartLauncher()
    run([cell], tmp_path, settings={"timeout_s": 1}, launcher=launcher)
    record = read_record(record_path(tmp_path, cell))
    assert record["status"] == "timeout", record["error"]
    assert launcher.limits == [("probe", PROBE_TIMEOUT_S), ("run_job", 1)]
    assert_valid(record)


def test_cell_scratch_folders_live_under_the_run_folder_and_go_when_done(tmp_path):
    launcher = SlowStartLauncher()
    scratch = []
    launcher.run = lambda name, args, timeout_s: (
        scratch.append(args[0]["scratch_dir"]) if name == "run_job" else None,
        Outcome(exitcode=0, timed_out=False, messages=[{"device": "cpu"}]))[1]
    run([tiny_cell()], tmp_path, launcher=launcher)
    assert Path(scratch[0]).parent == tmp_path / SCRATCH_DIRNAME
    assert Path(scratch[0]).name.startswith("matrixbench-cell-")
    assert not (tmp_path / SCRATCH_DIRNAME).exists()


def test_resume_skips_recorded_cells_force_and_retry_failed_rerun(tmp_path, monkeypatch):
    good, bad = tiny_cell(), tiny_cell(batch_size=2)
    inject_faults(monkeypatch, {bad: "error"})
    run([good, bad], tmp_path)
    first = read_record(record_path(tmp_path, good))["started_at"], os.stat(record_path(tmp_path, good)).st_mtime_ns

    results, lines = run([good, bad], tmp_path)
    assert results == [] and "2 already recorded, 0 to run" in lines[0]

    results, _ = run([good, bad], tmp_path, retry_failed=True)
    assert [cell_id for cell_id, _ in results] == ["resnet-tiny_bs2_eager_float32"]
    assert os.stat(record_path(tmp_path, good)).st_mtime_ns == first[1]

    results, _ = run([good], tmp_path, force=True)
    assert results == [("resnet-tiny_bs1_eager_float32", "ok")]
    assert os.stat(record_path(tmp_path, good)).st_mtime_ns != first[1]


def test_cuda_requested_without_gpu_gives_error_records(tmp_path):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    cell = tiny_cell()
    results, _ = run([cell], tmp_path, settings={"device": "cuda"})
    record = read_record(record_path(tmp_path, cell))
    assert results == [(record["cell_id"], "error")]
    assert "settings.device is 'cuda'" in record["error"]["message"]
    assert record["device"] == "cuda"
    assert_valid(record)


def test_python_m_runner_shorthand_end_to_end(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "runner", "--models", "resnet", "--modes", "eager", "--size", "tiny",
         "--iterations", "3", "--device", "cpu", "--out", str(tmp_path), "--image-name", "local"],
        capture_output=True, text=True, timeout=600, cwd=os.path.dirname(os.path.dirname(__file__)))
    assert result.returncode == 0, result.stderr
    record = json.loads((tmp_path / "resnet-tiny_bs1_eager_float32.json").read_text())
    assert record["status"] == "ok" and record["timing"]["n"] == 3
    assert record["environment"]["image_name"] == "local"
    assert "[1/1] resnet-tiny_bs1_eager_float32: ok" in result.stderr
    assert result.stdout == ""


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["eager", "reduce-overhead"])
def test_gpu_cell_in_a_forked_process(tmp_path, mode):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs an NVIDIA GPU")
    cell = tiny_cell(mode=mode)
    run([cell], tmp_path, settings={"device": "auto", "iterations": 20})
    record = read_record(record_path(tmp_path, cell))
    assert record["status"] == "ok", record["error"]
    assert record["device"] == "cuda" and record["timing"]["timer"] == "cuda_event"
    assert record["memory"]["kind"] == "cuda_max_allocated" and record["memory"]["peak_bytes"] > 0
    assert record["environment"]["gpu_count"] >= 1 and record["environment"]["gpu_name"]
    if mode == "reduce-overhead":
        assert record["accuracy"]["status"] == "pass" and record["dynamo"]["recompiles"] == 0
        if counts_cudagraph_skips(torch.__version__):
            assert record["dynamo"]["cudagraph_skips"] == 0
    assert_valid(record)


def test_the_forkserver_guard_ends_a_forkserver_whose_runner_is_gone_and_nothing_else():
    """runner.lifetime.forkserver_dies_with_runner: a parent other than the runner named (it died before the
    request took effect) ends the process at once; without a runner named, nothing happens."""
    def guard(environ):
        code = f"from runner.lifetime import forkserver_dies_with_runner as g; print(g({environ!r}))"
        return subprocess.run(
            [sys.executable, "-c", code],
            cwd=os.path.dirname(os.path.dirname(__file__)), capture_output=True, text=True, timeout=120)

    orphaned = guard({"MATRIXBENCH_FORKSERVER_PARENT": "1"})
    assert (orphaned.returncode, orphaned.stdout) == (-9, ""), orphaned
    unnamed = guard({})
    assert (unnamed.returncode, unnamed.stdout.strip()) == (0, "False"), unnamed
    named = guard({"MATRIXBENCH_FORKSERVER_PARENT": str(os.getpid())})
    assert (named.returncode, named.stdout.strip()) == (0, "True"), named


def test_a_cell_whose_forkserver_died_before_its_first_line_ends_at_once():
    """runner.lifetime.cell_dies_with_forkserver: a cell's process forked just as its forkserver was killed (with
    its runner: on a loaded machine the child's first line can run long after the fork) would never get the death
    signal and live on, orphaned. Where the forkserver's pid is known (its preload noted it) and is no longer the
    parent, the cell ends at once; its parent alive, it goes on; no pid noted, the death signal alone."""
    def cell(noted):
        code = ("import runner.lifetime as lifetime; "
                f"lifetime._forkserver_pid = {noted}; print(lifetime.cell_dies_with_forkserver())")
        return subprocess.run([sys.executable, "-c", code], cwd=os.path.dirname(os.path.dirname(__file__)),
                              capture_output=True, text=True, timeout=120)

    orphaned = cell(1)               # its forkserver gone: the parent is another process now
    assert (orphaned.returncode, orphaned.stdout) == (-9, ""), orphaned
    alive = cell(os.getpid())        # this test is the child's parent
    assert (alive.returncode, alive.stdout.strip()) == (0, "True"), alive
    unnoted = cell(None)
    assert (unnoted.returncode, unnoted.stdout.strip()) == (0, "True"), unnoted


def test_the_forkserver_notes_its_pid_for_the_cells_it_forks():
    code = ("import os, runner.lifetime as lifetime; "
            "lifetime.forkserver_dies_with_runner({'MATRIXBENCH_FORKSERVER_PARENT': str(os.getppid())}); "
            "print(lifetime._forkserver_pid == os.getpid())")
    found = subprocess.run([sys.executable, "-c", code], cwd=os.path.dirname(os.path.dirname(__file__)),
                           capture_output=True, text=True, timeout=120)
    assert (found.returncode, found.stdout.strip()) == (0, "True"), found
