"""Real venvs: build two with two real torch versions from their pins (tests/data/venv-matrix.yaml),
run tiny-model cells on the CPU in both with `matrixbench run --backend venv`, and report them.

The venvs live where users' do (~/.cache/matrixbench/venvs, or under $XDG_CACHE_HOME), so a later
run reuses them; the wheels come through the shared wheelhouse (~/.cache/matrixbench/wheels), so
torch 2.0.1 (PyPI's CUDA build, about 2.5 GB with its nvidia-* wheels) is downloaded once for
venvs, Docker builds and reruns. Skips, saying so, when this host has no Python 3.10 or 3.11.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

from matrixbench.build.venvs import build_venvs, plan_venv, read_marker
from runner.schema import RECORD_SCHEMA, read_record
from venv_helpers import venv_fixtures

pytestmark = pytest.mark.venv

REPO = Path(__file__).resolve().parents[1]
MATRIX_PATH = REPO / "tests" / "data" / "venv-matrix.yaml"
TORCH = {"venv-stable": "2.0.1", "venv-latest": "2.13.0"}
BUILD_LOG = REPO / ".ci" / "cache" / "venv-e2e-build.log"
HF_TOKEN = "hf_venvNeverPrintThis"
CELLS = ["resnet-tiny_bs1_default_float32", "resnet-tiny_bs1_eager_float32",
         "vit-tiny_bs1_default_float32", "vit-tiny_bs1_eager_float32"]


matrix, built = venv_fixtures(MATRIX_PATH, BUILD_LOG)   # both venvs, built by matrixbench's own build


def matrixbench(*args, cwd=REPO):
    argv = [sys.executable, "-m", "matrixbench.cli", *args]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO), "HF_TOKEN": HF_TOKEN}
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=1800, check=False)
    return done.returncode, done.stdout + done.stderr


def records(out_dir):
    return {path.stem: read_record(path) for path in sorted(Path(out_dir).glob("*.json"))
            if path.name != "cells.json"}


def test_each_venv_holds_its_pinned_torch_and_its_identity(matrix, built):
    for name, version in TORCH.items():
        venv = built[name]
        assert venv is not None, f"{name}: no complete venv after the build"
        assert venv.torch.split("+")[0] == version
        assert venv.image_id == matrix.images[name].content_hash()
        assert venv.path.name == f"{name}-{venv.image_id}"
        freeze = (venv.path / "pip-freeze.txt").read_text().splitlines()
        assert any(line.startswith(f"torch=={version}") for line in freeze)


def test_each_venv_runs_its_cells_with_its_own_torch_and_the_report_compares_them(built, tmp_path):
    results = tmp_path / "results"
    code, output = matrixbench("run", "--matrix", str(MATRIX_PATH), "--results", str(results), "--run", "venvs",
                               "--backend", "venv", "--device", "cpu", "--cache-dir", str(tmp_path / "compile"))
    assert code == 0, output
    assert HF_TOKEN not in output
    for name, version in TORCH.items():
        out_dir = results / "venvs" / name
        found = records(out_dir)
        assert sorted(found) == CELLS, output
        for cid, record in found.items():
            jsonschema.validate(record, RECORD_SCHEMA)
            assert record["status"] == "ok", (cid, record["error"])
            assert record["environment"]["torch"] == built[name].torch
            assert record["environment"]["torch"].split("+")[0] == version
            assert record["environment"]["image_name"] == name
            assert record["environment"]["image_id"] == built[name].image_id
        assert HF_TOKEN not in (out_dir / "runner.log").read_text()
    code, output = matrixbench("report", str(results / "venvs"), "--out", str(tmp_path / "report"), "--format", "md")
    assert code == 0, output
    report = (tmp_path / "report" / "report.md").read_text()
    assert "## Image against image" in report
    assert "### venv-stable (torch 2.0.1) → venv-latest (torch 2.13.0) · CPU" in report


def test_a_second_build_reuses_the_venvs_and_other_pins_get_other_folders(matrix, built):
    lines = []
    build_venvs(matrix, None, on_progress=lambda name, line: lines.append((name, line)))
    venvs = {name: read_marker(plan_venv(matrix.images[name], root=built[name].path.parent)) for name in matrix.images}
    assert all(venv.facts is not None for venv in venvs.values())   # each build recorded what its torch is
    assert lines == [(name, f"using {built[name].path} ({venvs[name].facts.describe()})") for name in matrix.images]
    stable = matrix.images["venv-stable"]
    repinned = plan_venv(stable.__class__(**{**vars(stable), "extra_pins": ("numpy<1.26",)}))
    assert repinned.path != built["venv-stable"].path
    assert repinned.path.parent == built["venv-stable"].path.parent
    assert read_marker(repinned) is None  # never the venv of the other pins
    marker = json.loads((built["venv-stable"].path / "matrixbench-venv.json").read_text())
    assert marker["image_id"] == stable.content_hash() and marker["buildargs"]["EXTRA_PINS"] == "numpy<2"


def test_a_model_an_images_transformers_cannot_build_refuses_the_run_before_any_cell(built, tmp_path):
    """The run's model check in both real venvs: a config of a model_type transformers 4.43.4 lacks (5.23.0 has it)
    and one no transformers knows; refused naming each image's versions, nothing run."""
    data = yaml.safe_load(MATRIX_PATH.read_text())
    for name, model_type in (("newer", "dinov2_with_registers"), ("unknown", "no-such-architecture")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(json.dumps({"model_type": model_type}))
    data.update(size="full", models={"newer": {"config": "newer/config.json", "task": "image-classification"},
                                     "unknown": {"config": "unknown/config.json", "task": "image-classification"}})
    (tmp_path / "matrix.yaml").write_text(yaml.safe_dump(data))
    results = tmp_path / "results"
    code, output = matrixbench("run", "--matrix", str(tmp_path / "matrix.yaml"), "--results", str(results), "--run",
                               "check", "--backend", "venv", "--device", "cpu", cwd=tmp_path)
    assert code == 2, output
    assert "3 model build(s) fail before any cell ran" in output
    stable = f"(torch {built['venv-stable'].torch}, transformers 4.43.4)"
    latest = f"(torch {built['venv-latest'].torch}, transformers 5.23.0)"
    assert f"model newer in image venv-stable {stable}: " in output
    assert f"model unknown in image venv-stable {stable}: " in output
    assert f"model unknown in image venv-latest {latest}: " in output and "no-such-architecture" in output
    assert f"model check: image venv-latest {latest}: newer builds on the meta device" in output
    assert "--models leaving out newer, unknown" in output
    assert not list(results.glob("check/venv-*/*.json"))   # no record: no cell ran
    assert json.loads((results / "check" / "run.json").read_text())["status"] == "failed"
