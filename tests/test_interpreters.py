"""Finding a Python of a given version: on PATH, in pyenv's versions, through uv (fake layouts)."""
import stat

import pytest

from matrixbench.build.interpreters import Finder, find_interpreter, pyenv_candidates
from matrixbench.errors import InterpreterNotFoundError, MatrixbenchError


def fake_python(path, version, venv_ok=True):
    """An executable that answers the probe as a Python ``version`` would (and fails like one
    without the venv module when not ``venv_ok``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    answer = f'echo "{version} {path}"' if venv_ok else "echo 'No module named ensurepip' >&2; exit 1"
    path.write_text(f"#!/bin/sh\n{answer}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def finder(tmp_path, **environ):
    environ.setdefault("PATH", str(tmp_path / "bin"))
    environ.setdefault("PYENV_ROOT", str(tmp_path / "pyenv"))
    return Finder(environ=environ)


def test_path_comes_first(tmp_path):
    on_path = fake_python(tmp_path / "bin" / "python3.10", "3.10")
    fake_python(tmp_path / "pyenv" / "versions" / "3.10.13" / "bin" / "python3.10", "3.10")
    found = find_interpreter("3.10", finder(tmp_path))
    assert (found.path, found.found_by) == (on_path, "PATH")


def test_pyenv_newest_patch_release_first_and_other_minors_ignored(tmp_path):
    versions = tmp_path / "pyenv" / "versions"
    for name in ("3.10.9", "3.10.13", "3.1.99", "3.100.1", "3.10-dev"):
        fake_python(versions / name / "bin" / "python3.10", "3.10")
    assert [path.parent.parent.name for path in pyenv_candidates("3.10", finder(tmp_path))] == ["3.10.13", "3.10.9"]
    found = find_interpreter("3.10", finder(tmp_path))
    assert (found.path, found.found_by) == (versions / "3.10.13" / "bin" / "python3.10", "pyenv")


def test_a_candidate_that_is_another_version_or_cannot_make_a_venv_is_skipped(tmp_path):
    fake_python(tmp_path / "bin" / "python3.10", "3.11")  # a wrong symlink
    fake_python(tmp_path / "pyenv" / "versions" / "3.10.13" / "bin" / "python3.10", "3.10", venv_ok=False)
    good = fake_python(tmp_path / "pyenv" / "versions" / "3.10.2" / "bin" / "python3.10", "3.10")
    assert find_interpreter("3.10", finder(tmp_path)).path == good


def test_the_probe_reports_the_real_executable_behind_a_shim(tmp_path):
    real = fake_python(tmp_path / "real" / "python3.12", "3.12")
    shim = tmp_path / "bin" / "python3.12"
    shim.parent.mkdir()
    shim.write_text(f"#!/bin/sh\nexec {real} \"$@\"\n")
    shim.chmod(0o755)
    assert find_interpreter("3.12", finder(tmp_path)).path == real


def test_uv_is_asked_last(tmp_path):
    managed = fake_python(tmp_path / "uv-pythons" / "cpython-3.12" / "bin" / "python3.12", "3.12")
    uv = tmp_path / "bin" / "uv"
    uv.parent.mkdir()
    uv.write_text(f'#!/bin/sh\n[ "$1 $2 $3" = "python find 3.12" ] && echo {managed}\n')
    uv.chmod(0o755)
    found = find_interpreter("3.12", finder(tmp_path))
    assert (found.path, found.found_by) == (managed, "uv")


def test_pyenv_root_comes_from_pyenv_when_the_variable_is_unset(tmp_path):
    pyenv = tmp_path / "bin" / "pyenv"
    pyenv.parent.mkdir()
    pyenv.write_text(f'#!/bin/sh\necho {tmp_path / "elsewhere"}\n')
    pyenv.chmod(0o755)
    wanted = fake_python(tmp_path / "elsewhere" / "versions" / "3.9.18" / "bin" / "python3.9", "3.9")
    found = find_interpreter("3.9", Finder(environ={"PATH": str(tmp_path / "bin")}))
    assert found.path == wanted


def test_none_found_names_the_version_where_it_looked_and_how_to_get_it(tmp_path):
    with pytest.raises(InterpreterNotFoundError) as caught:
        find_interpreter("3.10", finder(tmp_path))
    message = str(caught.value)
    assert "no Python 3.10" in message
    assert str(tmp_path / "pyenv" / "versions") in message
    assert "pyenv install 3.10" in message and "uv python install 3.10" in message
    assert isinstance(caught.value, MatrixbenchError)
