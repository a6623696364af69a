"""Shared by the host tests: a small valid matrix, schema-valid records, a backend at our seam."""
import copy
import os
import subprocess
import sys
import textwrap
import threading
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml

from matrixbench.environments.base import Backend
from matrixbench.run.command import RunOptions
from matrixbench.run.layout import CELLS_FILENAME
from matrixbench.run.progress import NullProgress
from matrixbench.run.runner_input import write_cells_file
from runner.core import CellError, Record, Status
from runner.records import new_record, record_settings
from runner.schema import CHECK_FILENAME, CHECK_SCHEMA_VERSION, write_json_atomic, write_record

SMALL_MATRIX = {
    "images": {
        "stable": {"torch": "torch==2.0.1", "python": "3.10", "transformers": "transformers==4.43.4",
                   "extra_pins": ["numpy<2"], "index_url": "https://download.pytorch.org/whl/cu118"},
        "latest": {"torch": "torch==2.13.0", "python": "3.12", "transformers": "transformers==5.23.0"},
    },
    "models": {
        "vit": {"id": "google/vit-base-patch16-224", "task": "image-classification"},
        "detr-resnet-101": {"id": "facebook/detr-resnet-101", "task": "object-detection"},
    },
    "batch_sizes": [1, 4],
    "modes": ["eager", "default"],
    "iterations": 5,
    "warmup": 1,
    # The tests of a run's mechanics were written for images one after the other; turns (the default since stop 27)
    # have their own (test_executor_turns.py and the e2e turns tests), and the default is tested in test_matrix.py.
    "turns": False,
}


def small_matrix_data():
    return copy.deepcopy(SMALL_MATRIX)


def write_matrix(folder, data=None, name="matrix.yaml"):
    path = Path(folder) / name
    path.write_text(yaml.safe_dump(small_matrix_data() if data is None else data, sort_keys=False))
    return path


def make_record(cell, status="ok", mean_ms=2.5, device="cpu"):
    """A Record as the runner builds it (valid against RECORD_SCHEMA)."""
    ok = status == "ok"
    return Record(
        cell=cell,
        status=Status(status),
        error=None if ok else CellError(type="RuntimeError", message="boom", traceback=None),
        device=device,
        settings=record_settings({"iterations": 5, "warmup": 1, "timeout_s": 60, "device": "auto",
                                  "accuracy_tolerance": 0.001, "cv_threshold": 0.1}, cell),
        timing={"load_s": 0.1, "first_call_s": 3.0, "warmup_s": 0.1, "timer": "perf_counter", "n": 5,
                "mean_ms": mean_ms, "median_ms": mean_ms, "p90_ms": mean_ms, "p99_ms": mean_ms,
                "stdev_ms": 0.0, "min_ms": mean_ms, "max_ms": mean_ms, "cv": 0.0, "noisy": False,
                "samples_ms": [mean_ms] * 5} if ok else None,
        precision={"float32_matmul_precision": "highest", "cuda_matmul_allow_tf32": False,
                   "cudnn_allow_tf32": False},
        environment={"python": "3.11.7", "torch": "2.13.0", "torch_git": None, "transformers": "5.23.0",
                     "cuda": None, "cudnn": None, "gpu_name": None, "gpu_count": 0, "driver": None,
                     "cpu_model": None, "threads": 2, "platform": "linux", "hostname": "test",
                     "image_name": None, "image_id": None},
        started_at="2026-01-01T00:00:00+00:00",
        duration_s=1.0,
    )


class RecordingBackend(Backend):
    """Writes a record per requested repeat of a cell, in the request's order (status from
    ``statuses[model]``, default ok).

    After ``stop_after`` repeats (over all its requests) it raises KeyboardInterrupt (Ctrl-C mid-run);
    ``skip`` models get no record.
    """

    name = "recording"

    def __init__(self, statuses=None, stop_after=None, skip=(), gpus=False, exit_code=0, unbuildable=None):
        self.requests, self.probes, self.checks = [], [], []
        self.unbuildable = unbuildable or {}
        self.statuses = statuses or {}
        self.stop_after, self.ran = stop_after, 0
        self.skip = set(skip)
        self.gpus = gpus
        self.exit_code = exit_code

    def gpus_available(self):
        return self.gpus

    def run(self, request):
        if request.work.check:   # the run's model check: every model builds (``unbuildable``: not those)
            self.checks.append(request)
            return answer_check(request, self.unbuildable)
        if not request.work.runs_cells:   # a GPU run's noise probe: no records, as the runner writes none
            self.probes.append(request)
            return self.exit_code
        self.requests.append(request)
        write_cells_file(request, path=request.work_dir() / CELLS_FILENAME)   # as every backend does
        for repeat in request.repeats():
            if self.stop_after is not None and self.ran >= self.stop_after:
                raise KeyboardInterrupt
            self.ran += 1
            if repeat.cell.model not in self.skip:
                record = make_record(repeat.cell, self.statuses.get(repeat.cell.model, "ok"))
                record.repeat = repeat.index
                write_record(request.paths.out_dir, record)
        return self.exit_code


def answer_check(request, errors=None, torch="2.13.0", transformers="5.23.0"):
    """A fake runner's --check: check.json as runner/check.py writes it (``errors`` maps a model to its error;
    the others build); its exit code, 0."""
    errors = errors or {}
    models = [{"model": cell.model, "size": cell.size, "weights": cell.weights, "error": errors.get(cell.model)}
              for cell in request.work.cells]
    write_json_atomic(Path(request.paths.out_dir) / CHECK_FILENAME,
                      {"schema_version": CHECK_SCHEMA_VERSION, "image_name": request.image.name, "torch": torch,
                       "transformers": transformers, "models": models})
    return 0


class ConcurrentRecordingBackend(RecordingBackend):
    """A RecordingBackend whose requests take ``HOLD_S`` each, run from any thread: ``started`` lists
    (request, thread name, requests running at its start), ``most`` the largest of those counts."""

    HOLD_S = 0.2

    def __init__(self):
        super().__init__()
        self.lock, self.now, self.most, self.started = threading.Lock(), 0, 0, []

    def run(self, request):
        if request.work.check:   # the run's model check, before any unit: not one of the units
            return super().run(request)
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)
            self.started.append((request, threading.current_thread().name, self.now))
        try:
            threading.Event().wait(self.HOLD_S)
            return super().run(request)
        finally:
            with self.lock:
                self.now -= 1


def use_backend(monkeypatch, backend):
    """Register ``backend`` under the name "local" for the duration of a test."""
    from matrixbench import environments as backends

    monkeypatch.setitem(backends.FACTORIES, "local", lambda build_options=None, run_id=None: backend)
    return backend


STAND_IN = textwrap.dedent("""\
    #!{python}
    # Stands in for `python -m runner`: checks the argv contract, writes one record per cell.
    import json, os, sys, time
    sys.path.insert(0, {tests!r})
    from host_helpers import make_record
    from runner.core import Cell
    from runner.schema import CHECK_FILENAME, CHECK_SCHEMA_VERSION, write_json_atomic, write_record
    assert sys.argv[1:3] == ["-m", "runner"], sys.argv
    args = dict(zip(sys.argv[3::2], sys.argv[4::2]))
    doc = json.load(open(args["--cells"]))
    json.dump({{"argv": sys.argv[1:], "env": dict(os.environ), "doc": doc}},
              open(os.path.join(args["--out"], "seen.json"), "w"))
    print("a log line")
    for index, cell in enumerate(doc["cells"]):
        if index:  # the first record comes at once; STAND_IN_DELAY seconds pass before each later one
            time.sleep(float(os.environ.get("STAND_IN_DELAY", "0")))
        write_record(args["--out"], make_record(Cell.from_dict(cell)))
""")


def write_stand_in(path):
    """An executable runner stand-in at ``path`` (run as ``path -m runner ...``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(STAND_IN.format(python=sys.executable, tests=str(Path(__file__).resolve().parent)))
    path.chmod(0o755)
    return path


def synthetic_record(cells_file, device, environment):
    """A Record as the runner's builder (runner.records.new_record) makes it for the first cell of a
    cells file, with nothing measured yet: the report tests fill in the synthetic numbers."""
    gpu = device == "cuda"
    return new_record({
        "cell": cells_file.cells[0], "settings": cells_file.settings, "device": device, "environment": environment,
        "precision": {"float32_matmul_precision": "highest", "cuda_matmul_allow_tf32": False if gpu else None,
                      "cudnn_allow_tf32": True if gpu else None},
        "started_at": "2026-01-01T00:00:00+00:00", "start_clock": 0.0})


class Notes(NullProgress):
    """Progress that keeps the notes a run prints (e.g. what it stopped or refused)."""

    def __init__(self):
        super().__init__()
        self.notes = []

    def note(self, text):
        self.notes.append(text)


def local_run_options(tmp_path, **changes):
    """RunOptions of a local CPU run named r1 under ``tmp_path`` (results, cache, hf), with ``changes``."""
    values = dict(run_name="r1", results_root=tmp_path / "results", backend="local", device="cpu",
                  cache_root=tmp_path / "cache", hf_cache_dir=tmp_path / "hf", command=("matrixbench", "run"))
    values.update(changes)
    return RunOptions(**values)


@contextmanager
def tmpfs(folder, size):
    """A tmpfs of ``size`` ("512k", "4m") mounted at the new ``folder`` (root only: the test skips
    otherwise), unmounted after."""
    folder.mkdir()
    if os.getuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
                                          capture_output=True).returncode != 0:
        pytest.skip("needs root to mount a small tmpfs")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def answering(*unresolved):
    """A reachability checker (matrixbench.build.reachable) for which every index host answers but
    ``unresolved`` (its name does not resolve); no socket is opened."""
    import socket

    from matrixbench.build.reachable import Checker

    def resolver(host, port):
        if host in unresolved:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return [(socket.AF_INET, ("192.0.2.1", port))]
    return Checker(resolver, lambda family, address, timeout: None)


def report_with_figures(runs, out, formats=("md", "csv")):
    """``build_report`` of ``runs`` into ``out``, keeping every chart's Figure: {chart file name: Figure}."""
    from matrixbench.report import build_report, charts, cost_charts

    figures = {}
    real = charts._save
    with pytest.MonkeyPatch.context() as patch:
        for module in (charts, cost_charts):   # cost_charts imports charts' _save
            patch.setattr(module, "_save", lambda figure, folder, name, title: (
                figures.setdefault(name, figure), real(figure, folder, name, title))[1])
        build_report(list(runs), out, list(formats))
    return figures
