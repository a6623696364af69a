"""``matrixbench validate --build``: every model of the matrix built on the meta device (no
memory, no weights) by the runner in this interpreter, each failure named by model, so that a
broken config is found before a GPU is paid for. The images' own torch versions are not used.
"""
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from matrixbench.backends.base import RunRequest
from matrixbench.backends.local import runner_env
from matrixbench.errors import MatrixError
from matrixbench.matrix import expand_cells, runner_settings
from matrixbench.runner_input import write_cells_file
from runner.schema import CHECK_FILENAME

CHECK_TIMEOUT_S = 1800


def build_models(matrix, python=None):
    """{"torch": version, "models": [{"model", "size", "weights", "error"}]} from the runner."""
    with tempfile.TemporaryDirectory(prefix="matrixbench-build-check-") as folder:
        request = RunRequest(image_name="local", cells=_one_cell_per_model(matrix),
                             settings=runner_settings(matrix, "cpu"), out_dir=Path(folder))
        argv = [python or sys.executable, "-m", "runner", "--cells", str(write_cells_file(request)),
                "--out", folder, "--check"]
        done = subprocess.run(argv, env=runner_env(os.environ, request, {}), capture_output=True, text=True,
                              stdin=subprocess.DEVNULL, timeout=CHECK_TIMEOUT_S)
        answer = Path(folder) / CHECK_FILENAME
        if done.returncode != 0 or not answer.is_file():
            tail = "\n".join(done.stderr.strip().splitlines()[-15:])
            raise MatrixError(f"validate --build: the runner could not check the models "
                              f"(exit code {done.returncode}):\n{tail}")
        return json.loads(answer.read_text())


def describe_build(check):
    """One line per model that builds."""
    return "\n".join(f"  model {entry['model']}: builds on the meta device (torch {check['torch']}, "
                     "this interpreter)" for entry in check["models"] if entry["error"] is None)


def check_built(check):
    """MatrixError listing the models that do not build, each with its error."""
    failures = [f"  model {entry['model']}: does not build: {entry['error']}"
                for entry in check["models"] if entry["error"] is not None]
    if failures:
        raise MatrixError(f"{len(failures)} model(s) of the matrix do not build (torch {check['torch']}):\n"
                          + "\n".join(failures))


def _one_cell_per_model(matrix):
    cells = {}
    for cell in expand_cells(matrix):
        cells.setdefault(cell.model, cell)
    return list(cells.values())
