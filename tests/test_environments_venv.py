"""The venv backend with a stand-in venv: the container's runner contract, run by the venv's
interpreter, with the host allow-list environment and the image's content hash as its id."""
import json
import os
from pathlib import Path

import pytest

import runner
from host_helpers import write_matrix, write_stand_in
from matrixbench.build.venvs import plan_venv, recipe_hash
from matrixbench.environments import create_backend
from matrixbench.environments.base import ImageRef, Paths, Placement, RunRequest, Work
from matrixbench.environments.venv import VenvBackend
from matrixbench.errors import RunError
from matrixbench.matrix import Overrides, expand_cells, load_matrix
from runner.schema import read_record, record_path


@pytest.fixture
def matrix(tmp_path):
    return load_matrix(write_matrix(tmp_path), Overrides(models=["vit"], batch_sizes=[1]))


@pytest.fixture
def venv_root(tmp_path, matrix):
    """A complete venv for image 'stable' whose python is the runner stand-in."""
    root = tmp_path / "venvs"
    plan = plan_venv(matrix.images["stable"], root=root)
    write_stand_in(plan.python_bin)
    plan.marker.write_text(json.dumps({"image_id": plan.content_hash, "torch": "2.0.1+cu117", "recipe": recipe_hash(),
                                       "build": {"torch": "2.0.1+cu117", "cuda": "11.7", "arch_list": ["sm_86"]}}))
    return root


def request_for(tmp_path, matrix, torch=None, gpus=False, out_dir=None, cache_dir="compile"):
    paths = Paths(out_dir or tmp_path / "out", hf_cache_dir=tmp_path / "hf",
                  cache_dir=cache_dir and tmp_path / cache_dir / "stable")
    request = RunRequest(ImageRef("stable", torch=torch or matrix.images["stable"].torch),
                         Work(expand_cells(matrix), {"device": "cpu"}), paths, Placement(gpus=gpus),
                         env={"HF_TOKEN": "hf_secret"})
    request.paths.out_dir.mkdir(parents=True)
    return request


def run_stand_in(backend, matrix, request):
    lines = []
    backend.prepare([matrix.images["stable"]], emit=lambda name, line: lines.append((name, line)))
    assert backend.run(request) == 0
    return json.loads((request.paths.out_dir / "seen.json").read_text()), lines


def test_the_venv_runs_the_containers_argv_and_cells_file_with_the_hash_as_image_id(tmp_path, matrix, venv_root):
    request = request_for(tmp_path, matrix)
    seen, lines = run_stand_in(VenvBackend(root=venv_root), matrix, request)
    plan = plan_venv(matrix.images["stable"], root=venv_root)
    assert lines == [("stable", f"using {plan.path} (torch 2.0.1+cu117, CUDA 11.7 (sm_86))")]
    assert seen["argv"] == ["-m", "runner", "--cells", str(request.paths.out_dir / "cells.json"),
                            "--out", str(request.paths.out_dir)]
    assert seen["doc"]["image_id"] == matrix.images["stable"].content_hash()
    assert seen["doc"]["image_name"] == "stable"
    assert seen["doc"]["cells"] == [cell.to_dict() for cell in request.work.cells]
    assert all(read_record(record_path(request.paths.out_dir, cell))["status"] == "ok" for cell in request.work.cells)


def test_the_environment_is_the_allow_list_with_the_venv_first_and_no_host_pythonpath(
        tmp_path, matrix, venv_root, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", "/host/site-packages")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "leak")
    monkeypatch.setenv("VIRTUAL_ENV", "/the/hosts/venv")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,3")
    env, _ = run_stand_in(VenvBackend(root=venv_root), matrix, request_for(tmp_path, matrix))
    env = env["env"]
    plan = plan_venv(matrix.images["stable"], root=venv_root)
    assert env["PYTHONPATH"] == str(plan.path / "matrixbench-runner")  # nothing of the host's
    assert sorted(path.name for path in (plan.path / "matrixbench-runner").iterdir()) == ["runner"]
    assert (plan.path / "matrixbench-runner" / "runner").resolve() == Path(runner.__file__).resolve().parent
    assert env["PATH"].split(os.pathsep)[0] == str(plan.path / "bin")
    assert env["VIRTUAL_ENV"] == str(plan.path)
    assert "AWS_SECRET_ACCESS_KEY" not in env
    assert env["HF_TOKEN"] == "hf_secret" and env["HF_HOME"] == str(tmp_path / "hf")
    assert env["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "compile" / "stable" / "inductor")
    assert env["CUDA_VISIBLE_DEVICES"] == ""  # --device cpu: no GPU visible


def test_with_gpus_the_hosts_cuda_visible_devices_is_honoured(tmp_path, matrix, venv_root, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,3")
    seen, _ = run_stand_in(VenvBackend(root=venv_root), matrix, request_for(tmp_path, matrix, gpus=True))
    assert seen["env"]["CUDA_VISIBLE_DEVICES"] == "1,3"


def test_cold_sets_no_compile_cache(tmp_path, matrix, venv_root):
    seen, _ = run_stand_in(VenvBackend(root=venv_root), matrix, request_for(tmp_path, matrix, cache_dir=None))
    assert "TORCHINDUCTOR_CACHE_DIR" not in seen["env"] and "TRITON_CACHE_DIR" not in seen["env"]


def test_run_without_prepare_and_a_torch_mismatch_are_errors(tmp_path, matrix, venv_root):
    backend = VenvBackend(root=venv_root)
    with pytest.raises(RunError, match="no venv prepared"):
        backend.run(request_for(tmp_path, matrix))
    backend.prepare([matrix.images["stable"]], emit=lambda *_: None)
    with pytest.raises(RunError, match="has torch 2.0.1\\+cu117, but the matrix asks for torch==2.1.0"):
        backend.run(request_for(tmp_path, matrix, torch="torch==2.1.0", out_dir=tmp_path / "other"))


def test_the_registry_makes_it():
    assert isinstance(create_backend("venv"), VenvBackend)


def test_a_missing_venv_is_built_with_the_matrixs_build_settings(tmp_path, matrix, monkeypatch):
    """run --backend venv builds a venv it finds missing with the matrix's index and CA bundle (build settings),
    as `matrixbench build --backend venv` would; the bundle is a file while the build runs."""
    import matrixbench.environments.venv as venv_module
    from matrixbench.build.images import BuildOptions

    seen = []

    def fake_ensure(plan, emit, finder=None):
        bundle = plan.build.ca_bundle
        seen.append((plan.build.buildargs["INDEX_URL"], Path(bundle).read_bytes() if bundle else None))
        return "the venv"

    monkeypatch.setattr(venv_module, "ensure_venv", fake_ensure)
    options = BuildOptions(ca_bundle_pem=b"PEM", index_url="https://mirror.example/simple")
    create_backend("venv", build_options=options).prepare([matrix.images["stable"]])
    VenvBackend(root=tmp_path / "venvs").prepare([matrix.images["stable"]])
    assert seen[0] == ("https://mirror.example/simple", b"PEM")
    assert seen[1][0] != "https://mirror.example/simple" and seen[1][1] is None
