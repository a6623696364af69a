"""Attribution end to end with real venvs on the CPU: `stable` (torch 2.0.1 + transformers 4.43.4),
`latest` (torch 2.13.0 + transformers 5.23.0), the seed's own era (torch 2.0.1 + transformers 4.31.0)
and the bridge `attribution: true` derives (tests/data/venv-attribution-matrix.yaml), all built from
the shared wheelhouse by matrixbench's own venv build; tiny cells run in each with `matrixbench run
--backend venv`, and the report splits every mixed row. The other corner (torch 2.0.1 + transformers
5.23.0) cannot exist: transformers 5.23.0's own metadata (pip-downloaded into the wheelhouse) says
why, and the report shows that reason. The venvs are those of tests/test_venv_e2e.py where the pins
agree (~/.cache/matrixbench/venvs); the first build downloads torch (about 2.5 GB). Skips, saying so,
when this host has no Python 3.10 or 3.11.
"""
import csv
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from matrixbench.matrix import Overrides, load_matrix
from matrixbench.matrix.attribution import bridge_name
from runner.registry import DEFAULT_MODELS
from runner.schema import read_record
from venv_helpers import venv_fixtures

pytestmark = [pytest.mark.venv, pytest.mark.attribution_venvs]

REPO = Path(__file__).resolve().parents[1]
MATRIX_PATH = REPO / "tests" / "data" / "venv-attribution-matrix.yaml"
BUILD_LOG = REPO / ".ci" / "cache" / "venv-attribution-build.log"
BRIDGE = bridge_name("venv-latest", "venv-stable")
REFUSED = bridge_name("venv-stable", "venv-latest")
SPLIT_MODELS = "vit,resnet"


matrix, built = venv_fixtures(MATRIX_PATH, BUILD_LOG)   # the venvs, built by matrixbench's own build


def matrixbench(*args):
    argv = [sys.executable, "-m", "matrixbench.cli", *args]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)}
    done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=3000, check=False)
    return done.returncode, done.stdout + done.stderr


def records(out_dir):
    return [read_record(path) for path in sorted(Path(out_dir).glob("*.json")) if path.name != "cells.json"]


def test_the_plan_has_the_bridge_that_can_exist_and_transformers_reason_for_the_other(matrix):
    assert list(matrix.images) == ["venv-seed", "venv-stable", "venv-latest", BRIDGE]
    bridge = matrix.images[BRIDGE]
    assert (bridge.torch, bridge.python, bridge.transformers) == ("torch==2.13.0", "3.11", "transformers==4.43.4")
    (refused,) = matrix.refused
    assert refused.name == REFUSED
    assert "requires torch>=2.6" in refused.reason and "requires Python >=3.11.0" in refused.reason


def test_the_bridge_venv_holds_the_torch_of_one_side_and_the_transformers_of_the_other(matrix, built):
    venv = built[BRIDGE]
    assert venv is not None and venv.image_id == matrix.images[BRIDGE].content_hash()
    freeze = (venv.path / "pip-freeze.txt").read_text().splitlines()
    assert "transformers==4.43.4" in freeze and any(line.startswith("torch==2.13.0") for line in freeze)


def test_the_report_splits_every_mixed_row_and_shows_why_the_other_corner_is_missing(built, tmp_path):
    results = tmp_path / "results"
    # eager only: the split is the report's, whatever the mode (the cold compiles of both models in four venvs took
    # about 15 minutes of CI's 2 loaded cores and showed nothing more; test_venv_e2e compiles in the venvs)
    code, output = matrixbench("run", "--matrix", str(MATRIX_PATH), "--models", SPLIT_MODELS, "--modes", "eager",
                               "--results", str(results), "--run", "split", "--backend", "venv", "--device", "cpu",
                               "--cache-dir", str(tmp_path / "compile"))
    assert code == 0, output
    for image in ("venv-seed", "venv-stable", "venv-latest", BRIDGE):
        found = records(results / "split" / image)
        assert len(found) == 4, (image, output)    # 2 models x 2 processes
        assert all(record["status"] == "ok" for record in found), [(r["cell_id"], r["error"]) for r in found]
    code, output = matrixbench("report", str(results / "split"), "--out", str(tmp_path / "report"),
                               "--format", "md,csv")
    assert code == 0, output
    report = (tmp_path / "report" / "report.md").read_text()
    pairs = report.split("## Image against image")[1].split("\n## ")[0]
    mixed = [line for line in pairs.splitlines() if "mixes a transformers change (4.43.4 → 5.23.0)" in line]
    assert len(mixed) == 2   # a row a model
    lines = pairs.splitlines()
    for line in mixed:
        index = lines.index(line)
        assert lines[index + 1].startswith("| ↳ torch 2.0.1 → 2.13.0 (transformers 4.43.4)")
        assert lines[index + 2].startswith("| ↳ transformers 4.43.4 → 5.23.0 (torch 2.13.0)")
        for step in lines[index + 1:index + 3]:   # each step names its two cells' attention: eager asked, eager
            assert re.search(r"\| attention eager → eager \|$", step), step   # run (4.43.4 on torch 2.13 too)
    assert "## Whose change is it?" in report
    assert f"Split via {BRIDGE}: {REFUSED} cannot exist: transformers 5.23.0: it requires" in report
    with open(tmp_path / "report" / "comparisons.csv", newline="") as handle:
        kinds = [row["kind"] for row in csv.DictReader(handle)]
    assert kinds.count("torch_share") == kinds.count("transformers_share") == 2


def test_the_seed_era_venv_builds_and_runs_every_tiny_seed_model(built, tmp_path):
    assert built["venv-seed"] is not None and built["venv-seed"].torch.startswith("2.0.1")
    results = tmp_path / "results"
    code, output = matrixbench("run", "--matrix", str(MATRIX_PATH), "--images", "venv-seed", "--modes", "eager",
                               "--repeats", "1", "--results", str(results), "--run", "seed", "--backend", "venv",
                               "--device", "cpu", "--cache-dir", str(tmp_path / "compile"))
    assert code == 0, output
    found = {record["cell"]["model"]: record for record in records(results / "seed" / "venv-seed")}
    assert sorted(found) == sorted(DEFAULT_MODELS)   # the 11 seed models of the published tables
    for model, record in found.items():
        assert record["status"] == "ok", (model, record["error"])
        assert record["environment"]["transformers"] == "4.31.0"
    assert load_matrix(MATRIX_PATH, Overrides(images=["venv-seed"])).images["venv-seed"].published == "main"
