"""Resume planning, progress and ETA, the record watcher, and run orchestration through a backend."""
import json
import threading
import time

import jsonschema
import pytest

from host_helpers import RecordingBackend, make_record, use_backend, write_matrix
from matrixbench.errors import MatrixError, RunError
from matrixbench.matrix import Overrides, expand_cells, load_matrix
from matrixbench.run.command import RunOptions, run_matrix
from matrixbench.run.launch import RecordWatcher
from matrixbench.run.layout import run_dir
from matrixbench.run.manifest import read_manifest
from matrixbench.run.pending import pending_work
from matrixbench.run.progress import (
    NullProgress,
    ProgressState,
    eta_seconds,
    format_duration,
    record_summary,
)
from runner.schema import RECORD_SCHEMA, record_path, write_record


@pytest.fixture
def matrix(tmp_path):
    return load_matrix(write_matrix(tmp_path))


def test_the_test_records_follow_the_record_schema(matrix):
    for status in ("ok", "error"):
        jsonschema.validate(make_record(expand_cells(matrix)[0], status).to_dict(), RECORD_SCHEMA)


# --- resume --------------------------------------------------------------------------------

def _record_all(out_dir, cells, status="ok"):
    for cell in cells:
        write_record(out_dir, make_record(cell, status))


def test_plan_puts_each_image_under_results_run_image(matrix, tmp_path):
    plans = pending_work(matrix, tmp_path / "results" / "r1")
    assert [(p.image_name, p.out_dir) for p in plans] == [
        ("stable", tmp_path / "results" / "r1" / "stable"), ("latest", tmp_path / "results" / "r1" / "latest")]
    assert all(sorted((r.cell for r in p.pending), key=p.cells.index) == p.cells and p.done == 0 for p in plans)


def test_plan_skips_recorded_cells_and_retries_failed_ones_on_request(matrix, tmp_path):
    cells = expand_cells(matrix)
    out_dir = tmp_path / "stable"
    _record_all(out_dir, cells[:2], "ok")
    _record_all(out_dir, cells[2:3], "oom")
    (record_path(out_dir, cells[3])).write_text("{half a rec")  # unreadable: runs again

    def pending(image=0, **flags):   # the cells in matrix order (the run order shuffles modes)
        return sorted((r.cell for r in pending_work(matrix, tmp_path, **flags)[image].pending), key=cells.index)

    assert pending() == cells[3:]
    assert pending(retry_failed=True) == cells[2:]
    assert pending(force=True) == cells
    assert pending(image=1) == cells  # the other image has nothing yet


def test_run_names_must_be_folder_names(tmp_path):
    assert run_dir(tmp_path, "gpu-a100.2") == tmp_path / "gpu-a100.2"
    for bad in ("../up", "a/b", "", ".hidden"):
        with pytest.raises(MatrixError, match="--run"):
            run_dir(tmp_path, bad)


# --- progress and ETA ----------------------------------------------------------------------

@pytest.mark.parametrize("seconds, text", [(None, "--"), (0, "0s"), (12.4, "12s"), (185, "3m05s"), (3720, "1h02m")])
def test_format_duration(seconds, text):
    assert format_duration(seconds) == text


def test_eta_extrapolates_from_finished_cells():
    assert eta_seconds(elapsed=30, done=0, total=10) is None
    assert eta_seconds(elapsed=30, done=3, total=10) == pytest.approx(70)
    assert eta_seconds(elapsed=30, done=10, total=10) == 0


class FakeClock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_progress_state_counts_times_and_remembers_the_last_cell(matrix):
    clock = FakeClock()
    state = ProgressState(total=4, clock=clock)
    cells = expand_cells(matrix)
    clock.now += 20
    state.cell_finished("stable", cells[0], make_record(cells[0], "ok", mean_ms=12.345))
    clock.now += 20
    state.cell_finished("stable", cells[1], make_record(cells[1], "error"))
    assert (state.counter(), state.elapsed_s(), state.eta_s()) == ("2/4", 40, 40)
    assert dict(state.statuses) == {"ok": 1, "error": 1}
    line = state.describe()
    assert "2/4" in line and "elapsed 40s" in line and "eta 40s" in line
    assert "stable vit default bs=1: error: RuntimeError: boom" in line


def test_record_summary_shows_latency_compile_time_and_device(matrix):
    eager, compiled = expand_cells(matrix)[:2]
    assert record_summary(make_record(eager, mean_ms=1.5)) == "ok 1.50 ms on cpu"
    assert record_summary(make_record(compiled, mean_ms=1.5, device="cuda")) == "ok 1.50 ms (compile 3.0 s) on cuda"
    assert record_summary(make_record(compiled, "oom")) == "oom: RuntimeError: boom"
    noisy = make_record(eager, mean_ms=1.5)
    noisy.timing.update(cv=0.31, noisy=True)
    assert record_summary(noisy) == "ok 1.50 ms on cpu, noisy (cv 0.31)"


# --- the record watcher --------------------------------------------------------------------

def test_watcher_reports_each_new_record_once(matrix, tmp_path):
    cells = expand_cells(matrix)[:3]
    seen = []
    watcher = RecordWatcher(tmp_path, cells, lambda cell, record: seen.append(cell.mode))
    assert watcher.poll() == 0
    write_record(tmp_path, make_record(cells[1]))
    (tmp_path / "unrelated.json").write_text("{}")
    assert watcher.poll() == 1
    assert watcher.poll() == 0
    assert seen == ["default"]
    assert watcher.waiting == [cells[0], cells[2]]


def test_watcher_sees_rewritten_records_but_not_old_ones(matrix, tmp_path):
    cell = expand_cells(matrix)[0]
    write_record(tmp_path, make_record(cell, "error"))
    seen = []
    watcher = RecordWatcher(tmp_path, [cell], lambda c, record: seen.append(record.status.value))
    assert watcher.poll() == 0  # there before the run started (a --force rerun overwrites it)
    write_record(tmp_path, make_record(cell, "ok"))
    watcher.poll()
    assert seen == ["ok"]


def test_watcher_waits_for_a_readable_record(matrix, tmp_path):
    cell = expand_cells(matrix)[0]
    watcher = RecordWatcher(tmp_path, [cell], lambda c, r: None)
    record_path(tmp_path, cell).write_text("{not json")
    assert watcher.poll() == 0 and watcher.waiting == [cell]


def test_watcher_thread_reports_records_written_while_it_runs(matrix, tmp_path):
    cells = expand_cells(matrix)[:2]
    seen = []
    with RecordWatcher(tmp_path, cells, lambda cell, record: seen.append(cell.mode), interval=0.01):
        write_record(tmp_path, make_record(cells[0]))
        deadline = time.monotonic() + 5
        while not seen and time.monotonic() < deadline:
            time.sleep(0.01)
        assert seen == ["eager"]  # seen by the thread, before the final poll
        write_record(tmp_path, make_record(cells[1]))
    assert seen == ["eager", "default"]  # the final poll on exit


# --- run_matrix ----------------------------------------------------------------------------

class RecordingProgress(NullProgress):
    def __init__(self):
        super().__init__()
        self.events = []

    def start(self, total, skipped):
        super().start(total, skipped)
        self.events.append(("start", total, skipped))

    def cell_finished(self, image_name, cell, record):
        super().cell_finished(image_name, cell, record)
        self.events.append(("cell", image_name, cell.model, cell.mode, record.status.value))

    def note(self, text):
        self.events.append(("note", text))


def _options(tmp_path, **changes):
    values = dict(run_name="r1", results_root=tmp_path / "results", backend="local", device="auto",
                  cache_root=tmp_path / "cache", hf_cache_dir=tmp_path / "hf", command=("matrixbench", "run"))
    values.update(changes)
    return RunOptions(**values)


def test_run_records_every_cell_per_image_and_writes_the_manifest(matrix, tmp_path, monkeypatch):
    backend = use_backend(monkeypatch, RecordingBackend())
    progress = RecordingProgress()
    summary = run_matrix(matrix, _options(tmp_path, note="why"), progress=progress)
    run_path = tmp_path / "results" / "r1"
    cells = expand_cells(matrix)
    for image in ("stable", "latest"):
        assert sorted(p.name for p in (run_path / image).glob("*_*.json")) == sorted(
            record_path(run_path / image, c).name for c in cells)
    assert [r.image.name for r in backend.requests] == ["stable", "latest"]
    written = json.loads((run_path / "stable" / "cells.json").read_text())["cells"]
    assert sorted(json.dumps(c, sort_keys=True) for c in written) == sorted(
        json.dumps(c.to_dict(), sort_keys=True) for c in cells)
    assert progress.events[0][0] == "note" and ("start", 16, 0) in progress.events
    assert len([e for e in progress.events if e[0] == "cell"]) == 16
    assert summary.statuses() == {"ok": 16}
    manifest = read_manifest(run_path)
    assert (manifest["status"], manifest["note"], manifest["images"]) == ("finished", "why", ["stable", "latest"])
    assert manifest["matrix_hash"] == matrix.content_hash() and manifest["ended_at"]
    assert manifest["cells"] == {"ran": 16, "skipped": 0, "missing": 0, "statuses": {"ok": 16}}


def test_run_requests_carry_settings_caches_and_gpus(matrix, tmp_path, monkeypatch):
    backend = use_backend(monkeypatch, RecordingBackend())
    run_matrix(matrix, _options(tmp_path, device="cpu"))
    request = backend.requests[0]
    assert request.work.settings["device"] == "cpu" and request.work.settings["iterations"] == 5
    assert request.paths.cache_dir == tmp_path / "cache" / "stable"
    assert request.paths.hf_cache_dir == tmp_path / "hf"
    assert request.placement.gpus is False
    run_matrix(matrix, _options(tmp_path, run_name="r2", cold=True))
    assert backend.requests[-1].paths.cache_dir is None


def test_a_rerun_skips_recorded_cells_and_retries_failed_ones(matrix, tmp_path, monkeypatch):
    use_backend(monkeypatch, RecordingBackend(statuses={"vit": "error"}))
    run_matrix(matrix, _options(tmp_path))
    backend = use_backend(monkeypatch, RecordingBackend())
    progress = RecordingProgress()
    run_matrix(matrix, _options(tmp_path), progress=progress)
    assert backend.requests == [] and ("start", 0, 16) in progress.events
    run_matrix(matrix, _options(tmp_path, retry_failed=True))
    assert {c.model for r in backend.requests for c in r.work.cells} == {"vit"}
    assert sum(len(r.work.cells) for r in backend.requests) == 8
    run_matrix(matrix, _options(tmp_path, force=True))
    assert sum(len(r.work.cells) for r in backend.requests) == 8 + 16


def test_ctrl_c_keeps_finished_records_and_a_rerun_finishes_the_rest(matrix, tmp_path, monkeypatch):
    use_backend(monkeypatch, RecordingBackend(stop_after=3))
    progress = RecordingProgress()
    with pytest.raises(KeyboardInterrupt):
        run_matrix(matrix, _options(tmp_path), progress=progress)
    run_path = tmp_path / "results" / "r1"
    assert len(list((run_path / "stable").glob("vit_*.json"))) == 3
    assert len([e for e in progress.events if e[0] == "cell"]) == 3
    assert read_manifest(run_path)["status"] == "interrupted"
    backend = use_backend(monkeypatch, RecordingBackend())
    run_matrix(matrix, _options(tmp_path))
    assert [len(r.work.cells) for r in backend.requests] == [8 - 3, 8]
    manifest = read_manifest(run_path)
    assert manifest["status"] == "finished" and manifest["history"][0]["status"] == "interrupted"


def test_cells_left_without_a_record_fail_the_run_after_every_image(matrix, tmp_path, monkeypatch):
    backend = use_backend(monkeypatch, RecordingBackend(skip={"detr-resnet-101"}, exit_code=3))
    with pytest.raises(RunError, match=r"4 cell\(s\) without a record \(runner exit code 3\)"):
        run_matrix(matrix, _options(tmp_path))
    assert len(backend.requests) == 2
    assert read_manifest(tmp_path / "results" / "r1")["status"] == "incomplete"


def test_asking_for_cuda_without_a_gpu_is_a_clear_error(matrix, tmp_path, monkeypatch):
    backend = use_backend(monkeypatch, RecordingBackend(gpus=False))
    with pytest.raises(RunError, match="--device cuda.*no NVIDIA GPU.*--device cpu"):
        run_matrix(matrix, _options(tmp_path, device="cuda"))
    assert backend.requests == []


def test_auto_device_uses_gpus_when_the_backend_has_them(matrix, tmp_path, monkeypatch):
    backend = use_backend(monkeypatch, RecordingBackend(gpus=True))
    progress = RecordingProgress()
    run_matrix(matrix, _options(tmp_path), progress=progress)
    assert all(r.placement.gpus for r in backend.requests) and ("note", "device: cuda") in progress.events
    assert all(r.work.settings["device"] == "cuda" for r in backend.requests)   # never a silent CPU run
    # the GPU run's noise check came first, in the first image's environment; this fake runner answers no
    # probe: a status line, and the run went on (matrixbench.run.noise_check; tests/test_host_noise_probe.py)
    assert len(backend.probes) == 1 and backend.probes[0].work.settings["device"] == "cuda"
    assert backend.probes[0].placement.gpus and backend.probes[0].work.mode_argv()[0] == "--noise-probe"
    assert any(e[0] == "note" and e[1].startswith("noise check: not measured (") for e in progress.events)
    assert read_manifest(tmp_path / "results" / "r1")["noise_check"]["status"] == "not measured"
    run_matrix(matrix, _options(tmp_path, run_name="cpu", device="cpu"))
    assert backend.requests[-1].placement.gpus is False and len(backend.probes) == 1   # no check on the CPU


def test_a_gpu_run_states_its_noise_check_before_its_bill_and_its_first_cell(matrix, tmp_path, monkeypatch):
    """Know the machine before the bill (issue 32 item 3): a GPU run says what its noise check found (here: not
    measured, this fake runner answers no probe) or that it was skipped, then prints the bill, then starts its
    first cell, so whoever reads a warning can stop before paying for the cells; a resume with nothing left to
    run checks nothing and still prints its bill."""
    import functools

    import host_helpers

    monkeypatch.setattr(host_helpers, "make_record", functools.partial(host_helpers.make_record, device="cuda"))
    backend = use_backend(monkeypatch, RecordingBackend(gpus=True))

    def order(events, said):
        def first(kind, text=""):
            return next(i for i, event in enumerate(events) if event[0] == kind and str(event[1]).startswith(text))
        return first("note", said), first("note", "estimated duration"), first("start"), first("cell")

    for name, flags, said in (("r1", {}, "noise check: not measured ("),
                              ("r2", {"noise_check": False}, "noise check: skipped (--no-noise-check)")):
        progress = RecordingProgress()
        run_matrix(matrix, _options(tmp_path, run_name=name, **flags), progress=progress)
        check, bill, start, cell = order(progress.events, said)
        assert check < bill < start < cell
    assert len(backend.probes) == 1

    progress = RecordingProgress()
    run_matrix(matrix, _options(tmp_path), progress=progress)   # r1 again: every cell has its record
    assert not any(event[0] == "note" and event[1].startswith("noise check") for event in progress.events)
    assert any(event[0] == "note" and event[1].startswith("estimated duration") for event in progress.events)
    assert len(backend.probes) == 1


def test_auto_device_never_runs_a_gpu_host_on_the_cpu(matrix, tmp_path, monkeypatch):
    from gpu_fakes import query_gpu
    from matrixbench.gpu import GpusUnreachableError, parse_gpus

    monkeypatch.setattr("matrixbench.run.command.host_gpus", lambda: parse_gpus(query_gpu("H100", "550")))
    backend = use_backend(monkeypatch, RecordingBackend(gpus=False))   # Docker without the toolkit
    with pytest.raises(GpusUnreachableError, match=r"1 NVIDIA GPU\(s\) \(NVIDIA H100 80GB HBM3\).*--backend venv"):
        run_matrix(matrix, _options(tmp_path))
    assert backend.requests == []
    run_matrix(matrix, _options(tmp_path, run_name="cpu", device="cpu"))   # asked for: runs
    assert backend.requests and backend.requests[-1].placement.gpus is False


def test_auto_device_falls_back_to_cpu_and_says_so(matrix, tmp_path, monkeypatch):
    backend = use_backend(monkeypatch, RecordingBackend(gpus=False))
    progress = RecordingProgress()
    run_matrix(matrix, _options(tmp_path), progress=progress)
    assert any(e[0] == "note" and "device: cpu (no NVIDIA GPU" in e[1] for e in progress.events)
    assert backend.requests[-1].work.settings["device"] == "auto"


def test_hf_token_reaches_the_runner_only_at_run_time_and_is_never_written(matrix, tmp_path, monkeypatch):
    backend = use_backend(monkeypatch, RecordingBackend())
    token = "hf_secret_value_123"
    run_matrix(matrix, _options(tmp_path), environ={"HF_TOKEN": token, "OTHER": "x"})
    request = backend.requests[0]
    assert request.env == {"HF_TOKEN": token}
    assert token not in repr(request)
    written = "".join(p.read_text() for p in (tmp_path / "results").rglob("*.json"))
    assert token not in written


def test_image_env_is_passed_at_run_time(tmp_path, monkeypatch):
    from host_helpers import small_matrix_data

    data = small_matrix_data()
    data["images"]["stable"]["env"] = {"OMP_NUM_THREADS": "1"}
    matrix = load_matrix(write_matrix(tmp_path, data), Overrides(images=["stable"]))
    backend = use_backend(monkeypatch, RecordingBackend())
    run_matrix(matrix, _options(tmp_path), environ={})
    assert backend.requests[0].env == {"OMP_NUM_THREADS": "1"}


def test_unknown_backends_are_rejected_with_the_valid_names(matrix, tmp_path):
    with pytest.raises(RunError, match="unknown backend 'podman'; valid: docker, local"):
        run_matrix(matrix, _options(tmp_path, backend="podman"))


def test_manifest_is_json_with_sorted_keys(matrix, tmp_path, monkeypatch):
    use_backend(monkeypatch, RecordingBackend())
    run_matrix(matrix, _options(tmp_path))
    text = (tmp_path / "results" / "r1" / "run.json").read_text()
    assert text == json.dumps(json.loads(text), sort_keys=True, indent=1) + "\n"
    assert json.loads(text)["command"] == ["matrixbench", "run"]


def test_watcher_threads_do_not_outlive_the_run(matrix, tmp_path, monkeypatch):
    use_backend(monkeypatch, RecordingBackend())
    run_matrix(matrix, _options(tmp_path))
    assert not [t for t in threading.enumerate() if t.name == "record-watcher"]


def test_a_run_whose_every_cell_failed_raises_and_says_failed(matrix, tmp_path, monkeypatch):
    use_backend(monkeypatch, RecordingBackend(statuses={"vit": "error", "detr-resnet-101": "oom"}))
    with pytest.raises(RunError, match=r"16 of 16 cells failed .*--retry-failed reruns them"):
        run_matrix(matrix, _options(tmp_path))
    assert read_manifest(tmp_path / "results" / "r1")["status"] == "failed"


def test_some_failures_finish_the_run_and_the_last_line_says_so(matrix, tmp_path, monkeypatch):
    use_backend(monkeypatch, RecordingBackend(statuses={"vit": "error"}))
    summary = run_matrix(matrix, _options(tmp_path))
    assert summary.describe().splitlines()[-1].startswith("8 of 16 cells failed")
    assert read_manifest(tmp_path / "results" / "r1")["status"] == "finished"


def test_a_rerun_counts_the_recorded_failures_it_skips(matrix, tmp_path, monkeypatch):
    use_backend(monkeypatch, RecordingBackend(statuses={"vit": "error"}))
    run_matrix(matrix, _options(tmp_path))
    progress = RecordingProgress()
    summary = run_matrix(matrix, _options(tmp_path), progress=progress)
    assert ("note", "8 recorded cells are failures; --retry-failed reruns them") in progress.events
    assert "4 of them failures" in summary.describe()
    assert summary.describe().splitlines()[-1].startswith("8 of 16 cells failed")


def test_a_rerun_replacing_a_corrupt_record_says_so(matrix, tmp_path, monkeypatch):
    use_backend(monkeypatch, RecordingBackend())
    run_matrix(matrix, _options(tmp_path))
    corrupt = record_path(tmp_path / "results" / "r1" / "stable", expand_cells(matrix)[0])
    corrupt.write_text('{"schema_version": 1, ')
    progress = RecordingProgress()
    run_matrix(matrix, _options(tmp_path), progress=progress)
    notes = [event[1] for event in progress.events if event[0] == "note"]
    line, = [note for note in notes if note.startswith(f"{corrupt}: unreadable record, its cell reruns and replace")]
    assert line.count(str(corrupt)) == 1 and line.endswith("(not a readable record (not valid JSON: Expecting "
                                                           "property name enclosed in double quotes: line 1 column "
                                                           "23 (char 22)))"), line   # the path once, then why
    assert ("start", 1, 15) in progress.events


@pytest.mark.parametrize("gpu, visible, expected", [
    (None, "", ()), (None, "1,3", ("1", "3")), ("GPU-5f0e1d2c", "1,3", ("GPU-5f0e1d2c",)), ("0", "", ("0",)),
])
def test_gpu_choice_is_the_flag_else_cuda_visible_devices(gpu, visible, expected):
    from matrixbench.executors.base import gpu_choice

    assert gpu_choice(gpu, {"CUDA_VISIBLE_DEVICES": visible}) == expected


def test_a_run_whose_environment_starts_no_runner_here_records_why_its_noise_was_not_measured(tmp_path):
    """A GPU run that plans a check (not --executor ray) in an environment that starts no runner on this host
    (Ray's): run.json's noise_check says why in the plan's words, never a made-up reason."""
    import types

    from matrixbench.run.command import _noise_check
    from matrixbench.run.noise_check import NOT_MEASURED, RAY_WHY, plan_check

    progress = RecordingProgress()
    work = types.SimpleNamespace(pending=True)
    for executor, why in ((None, RAY_WHY), ("ray", plan_check(True, [work], True, "ray").why)):
        run = types.SimpleNamespace(works=[work], gpus=True, path=tmp_path,
                                    options=types.SimpleNamespace(noise_check=True, executor=executor))
        manifest = _noise_check(object(), run, {"status": "running"}, progress)
        assert manifest["noise_check"] == {"status": NOT_MEASURED, "why": why}
        assert json.loads((tmp_path / "run.json").read_text())["noise_check"] == manifest["noise_check"]
        assert progress.events[-1] == ("note", f"noise check: not run ({why})")
