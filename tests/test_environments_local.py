"""The backend registry and the local backend (the runner in this interpreter, no Docker)."""
import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

import runner
from host_helpers import write_matrix, write_stand_in
from matrixbench.environments import backend_names, create_backend
from matrixbench.environments.base import ImageRef, Paths, Placement, RunRequest, Work
from matrixbench.environments.local import LocalBackend, _running, _stop, descendants, runner_env
from matrixbench.errors import RunError
from matrixbench.matrix import Overrides, expand_cells, load_matrix
from runner.schema import CELLS_SCHEMA_VERSION, read_record, record_path

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent


# --- registry ------------------------------------------------------------------------------

def test_registry_names_and_rejects_unknown_backends():
    assert backend_names() == ["docker", "local", "venv"]
    assert isinstance(create_backend("local"), LocalBackend)
    with pytest.raises(RunError, match="unknown backend 'ssh'; valid: docker, local, venv"):
        create_backend("ssh")


# --- environment ---------------------------------------------------------------------------

def _request(tmp_path, cells=(), settings=None, cache_dir="cache", gpus=False, env=None, torch=None):
    paths = Paths(tmp_path / "out", cache_dir=cache_dir and tmp_path / cache_dir, hf_cache_dir=tmp_path / "hf")
    return RunRequest(ImageRef("stable", torch=torch), Work(list(cells), settings or {"iterations": 2}), paths,
                      Placement(gpus=gpus), env=env or {})


def test_runner_env_is_an_allow_list_plus_the_request(tmp_path):
    environ = {"PATH": "/bin", "HOME": "/root", "AWS_SECRET_ACCESS_KEY": "x", "HF_TOKEN": "from-shell",
               "TORCHINDUCTOR_MAX_AUTOTUNE": "1", "PYTHONPATH": "/elsewhere"}
    request = _request(tmp_path, env={"HF_TOKEN": "hf_abc", "OMP_NUM_THREADS": "2"})
    env = runner_env(environ, request, {"TORCHINDUCTOR_CACHE_DIR": "/c/inductor"})
    assert "AWS_SECRET_ACCESS_KEY" not in env
    assert env["HF_TOKEN"] == "hf_abc" and env["OMP_NUM_THREADS"] == "2"
    assert env["TORCHINDUCTOR_MAX_AUTOTUNE"] == "1" and env["TORCHINDUCTOR_CACHE_DIR"] == "/c/inductor"
    assert env["HF_HOME"] == str(tmp_path / "hf")
    assert env["PYTHONPATH"] == os.pathsep.join([str(Path(runner.__file__).parent.parent), "/elsewhere"])
    assert env["CUDA_VISIBLE_DEVICES"] == ""  # no GPUs asked for: none visible


def test_runner_env_leaves_gpus_visible_when_asked_for(tmp_path):
    env = runner_env({"CUDA_VISIBLE_DEVICES": "1"}, _request(tmp_path, gpus=True), {})
    assert env["CUDA_VISIBLE_DEVICES"] == "1"


def test_without_hf_token_the_shell_token_is_not_passed(tmp_path):
    env = runner_env({"HF_TOKEN": "from-shell"}, _request(tmp_path), {})
    assert "HF_TOKEN" not in env


# --- running a runner stand-in (the argv contract) -----------------------------------------

@pytest.fixture
def stand_in(tmp_path):
    path = tmp_path / "python-stand-in"
    return write_stand_in(path)


@pytest.fixture
def cells(tmp_path):
    matrix = load_matrix(write_matrix(tmp_path))
    return expand_cells(load_matrix(matrix.path, Overrides(models=["vit"], batch_sizes=[1])))


def test_local_backend_runs_the_runner_with_a_cells_file_and_logs(tmp_path, stand_in, cells):
    request = _request(tmp_path, cells, settings={"iterations": 2, "device": "cpu"})
    request.paths.out_dir.mkdir()
    assert LocalBackend(python=str(stand_in)).run(request) == 0
    seen = json.loads((request.paths.out_dir / "seen.json").read_text())
    cells_file = request.paths.out_dir / "cells.json"
    assert seen["argv"] == ["-m", "runner", "--cells", str(cells_file), "--out", str(request.paths.out_dir)]
    assert seen["doc"] == {"schema_version": CELLS_SCHEMA_VERSION, "settings": {"iterations": 2, "device": "cpu"},
                           "image_name": "stable",
                           "image_id": None, "cells": [c.to_dict() for c in cells]}
    assert seen["env"]["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "cache" / "inductor")
    assert seen["env"]["TRITON_CACHE_DIR"] == str(tmp_path / "cache" / "triton")
    assert [read_record(record_path(request.paths.out_dir, c))["status"] for c in cells] == ["ok", "ok"]
    assert "a log line" in (request.paths.out_dir / "runner.log").read_text()


def test_cold_runs_set_no_compile_cache_so_each_cell_compiles_in_its_own(tmp_path, stand_in, cells, monkeypatch):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "users-cache"))
    request = _request(tmp_path, cells, cache_dir=None)
    request.paths.out_dir.mkdir()
    LocalBackend(python=str(stand_in)).run(request)
    env = json.loads((request.paths.out_dir / "seen.json").read_text())["env"]
    assert "TORCHINDUCTOR_CACHE_DIR" not in env and "TRITON_CACHE_DIR" not in env


def test_ctrl_c_stops_the_runner_and_keeps_finished_records(tmp_path, stand_in, cells, sigint_raises):
    request = _request(tmp_path, cells, env={"STAND_IN_DELAY": "30"})
    request.paths.out_dir.mkdir()
    first = record_path(request.paths.out_dir, cells[0])
    sent = []
    timer = threading.Thread(target=_interrupt_when_exists, args=(first, sent), daemon=True)
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        LocalBackend(python=str(stand_in)).run(request)
    assert sent and time.monotonic() - sent[0] < 10   # from the Ctrl-C, not the 30 s the runner would still take
    time.sleep(2)  # the stopped runner must not write the second record
    assert first.exists() and not record_path(request.paths.out_dir, cells[1]).exists()


def _interrupt_when_exists(path, sent):
    """Ctrl-C once ``path`` is written, noting when in ``sent`` (a runner's start under load is not the backend's
    to answer for)."""
    deadline = time.monotonic() + 120
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    sent.append(time.monotonic())
    os.kill(os.getpid(), signal.SIGINT)


@pytest.mark.parametrize("spawn", ["sleep 60", "setsid sleep 60"], ids=["same-group", "own-session"])
def test_stop_ends_the_runner_and_everything_below_it(spawn):
    process = subprocess.Popen(["sh", "-c", f"{spawn} & echo $!; wait"], stdout=subprocess.PIPE,
                               start_new_session=True, text=True)
    child = int(process.stdout.readline())
    time.sleep(0.2)
    assert child in descendants(process.pid)
    _stop(process)
    assert process.poll() is not None
    time.sleep(0.2)
    assert not _running(child)


# --- end to end with the real runner -------------------------------------------------------

RUNNER_MISSING = not (REPO / "runner" / "__main__.py").exists()


@pytest.mark.slow
@pytest.mark.skipif(RUNNER_MISSING, reason="runner/__main__.py is not in this checkout yet")
def test_matrixbench_run_local_end_to_end(tmp_path, monkeypatch):
    """`matrixbench run --backend local`: tiny resnet, eager and default, on the CPU."""
    from click.testing import CliRunner

    from matrixbench.cli import main

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)
    args = ["run", "--matrix", str(REPO / "matrix-cpu-smoke.yaml"), "--images", "latest",
            "--models", "resnet", "--modes", "eager,default", "--iterations", "3", "--warmup", "1", "--repeats", "1",
            "--backend", "local", "--device", "cpu", "--cache-dir", str(tmp_path / "cache")]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    out_dir = tmp_path / "results" / "default" / "latest"
    records = [read_record(p) for p in sorted(out_dir.glob("resnet-tiny_*.json"))]
    assert [(r["cell"]["mode"], r["status"], r["device"]) for r in records] == [
        ("default", "ok", "cpu"), ("eager", "ok", "cpu")]
    assert all(r["timing"]["n"] == 3 and r["environment"]["image_name"] == "latest" for r in records)
    again = CliRunner().invoke(main, args)
    assert again.exit_code == 0 and "2 skipped" in again.output


def test_an_image_pinning_another_torch_is_refused(tmp_path):
    from matrixbench.environments.local import check_torch_pin
    from matrixbench.errors import RunError

    request = _request(tmp_path, [], torch="torch==2.0.1")
    with pytest.raises(RunError, match=r"image 'stable' pins torch==2\.0\.1, but --backend local runs "
                                       r"this interpreter's torch 2\.13\.0\+cpu.*--images NAME"):
        check_torch_pin(request.image, "2.13.0+cpu")
    check_torch_pin(_request(tmp_path, [], torch="torch==2.13.0").image, "2.13.0+cpu")
    check_torch_pin(_request(tmp_path, [], torch="torch>=2.1").image, "2.13.0+cpu")
