"""What the real-venv tests share: their matrix (skipped, saying so, without the Pythons it names) and
matrixbench's own venv build with its log in a file."""
import time

import pytest

from matrixbench.errors import InterpreterNotFoundError
from matrixbench.interpreters import find_interpreter
from matrixbench.matrix import load_matrix
from matrixbench.venvs import build_venvs, plan_venv, read_marker


def venv_matrix(path):
    """The matrix at ``path``; the test skips when this host lacks a Python version one of its images names."""
    matrix = load_matrix(path)
    for image in matrix.images.values():
        try:
            find_interpreter(image.python)
        except InterpreterNotFoundError as exc:
            pytest.skip(str(exc))
    return matrix


def build_logged(matrix, log_path):
    """Every image's venv, built (or found complete) by matrixbench's own build, its lines in ``log_path``;
    {image: its marker (venvs.read_marker), None when incomplete}."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with open(log_path, "w") as log:
        paths = build_venvs(matrix, None, on_progress=lambda name, line: print(f"[{name}] {line}", file=log,
                                                                                  flush=True))
    print(f"\nvenvs ready in {time.monotonic() - started:.0f} s: {', '.join(map(str, paths))} (log: {log_path})")
    return {plan.name: read_marker(plan) for plan in map(plan_venv, matrix.images.values())}


def venv_fixtures(matrix_path, log_path):
    """The module-scoped ``matrix`` and ``built`` fixtures of a real-venv test module (assign both)."""
    @pytest.fixture(scope="module")
    def matrix():
        return venv_matrix(matrix_path)

    @pytest.fixture(scope="module")
    def built(matrix):
        return build_logged(matrix, log_path)

    return matrix, built
