"""What the real-venv tests share: their matrix (skipped, saying so, without the Pythons it names) and
matrixbench's own venv build (once per session, tests/real_builds.py) with its log in a file."""
import pytest

from matrixbench.build.interpreters import find_interpreter
from matrixbench.errors import InterpreterNotFoundError
from matrixbench.matrix import load_matrix
from real_builds import VENV_MATRIX


def venv_matrix(path):
    """The matrix at ``path``; the test skips when this host lacks a Python version one of its images names."""
    matrix = load_matrix(path)
    for image in matrix.images.values():
        try:
            find_interpreter(image.python)
        except InterpreterNotFoundError as exc:
            pytest.skip(str(exc))
    return matrix


def venv_fixtures(matrix_path, log_path):
    """The module-scoped ``matrix`` and ``built`` fixtures of a real-venv test module (assign both): ``built`` is
    {image: its marker (venvs.read_marker), None when incomplete}, each venv built once per session by
    matrixbench's own build (tests/real_builds.py), its lines appended to ``log_path``; the venvs it shares with
    tests/data/venv-matrix.yaml's (the venv group's, built meanwhile on another worker) last."""
    @pytest.fixture(scope="module")
    def matrix():
        return venv_matrix(matrix_path)

    @pytest.fixture(scope="module")
    def built(matrix, real_builds):
        return real_builds.venvs(matrix, log_path, shared_with=load_matrix(VENV_MATRIX))

    return matrix, built
