"""A disk that fills while a cell is measured keeps that cell's numbers, for real: `matrixbench run --backend
local` writes its results to a 4 MiB tmpfs, and the first cell fills it (the injected fault ``full_disk``,
runner/faults.py) after its first call. The room the runner took before measuring (runner.files.Room) takes
the record; the next cell finds no room and is not measured; a rerun, once there is space, resumes with the
first record untouched. Root only (mount); marked slow (a real runner, real torch)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from host_helpers import tmpfs
from runner.faults import FILLER
from runner.files import ROOM_PREFIX
from test_faults_local import FIRST
from test_faults_local import HUNG as SECOND
from test_faults_local import MATRIX as FAULTS_MATRIX

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
FAULT = {"MATRIXBENCH_TEST_FAULTS": json.dumps({FIRST: "full_disk"})}
MATRIX = {**FAULTS_MATRIX, "images": {"latest": {**FAULTS_MATRIX["images"]["latest"], "env": FAULT}}}


@pytest.fixture
def disk(tmp_path):
    with tmpfs(tmp_path / "disk", "4m") as disk:
        yield disk


def run(tmp_path, disk):
    argv = [sys.executable, "-m", "matrixbench.cli", "run", "--matrix", str(tmp_path / "m.yaml"), "--backend",
            "local", "--device", "cpu", "--cache-dir", str(tmp_path / "cache"), "--results", str(disk / "results")]
    done = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=900,
                          env={**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)})
    return done.returncode, done.stdout + done.stderr


def test_a_disk_filled_while_measuring_keeps_the_cells_record_and_a_rerun_resumes(tmp_path, disk):
    (tmp_path / "m.yaml").write_text(yaml.safe_dump(MATRIX))
    out_dir = disk / "results" / "default" / "latest"
    code, output = run(tmp_path, disk)
    assert code == 5 and "Traceback" not in output, output   # cells without a record: rerun them
    filled = (out_dir / FILLER).stat().st_size
    assert filled > 3 * 2**20, filled   # the disk was full: all but the runner's files and its room
    first = json.loads((out_dir / f"{FIRST}.json").read_text())
    assert first["status"] == "ok" and first["timing"]["mean_ms"] > 0, first   # measured, kept whole
    assert not (out_dir / f"{SECOND}.json").exists()   # no room: not measured, no failure record in its place
    assert "No space left on device" in output and SECOND in output, output
    assert not [path.name for path in out_dir.iterdir() if path.name.endswith(".tmp")]   # no temp file, no room left
    kept = (out_dir / f"{FIRST}.json").read_bytes()

    (out_dir / FILLER).unlink()
    code, output = run(tmp_path, disk)
    assert code == 0, output
    assert (out_dir / f"{FIRST}.json").read_bytes() == kept, "the kept record was measured again"
    assert json.loads((out_dir / f"{SECOND}.json").read_text())["status"] == "ok"
    assert not list(out_dir.glob(ROOM_PREFIX + "*"))
