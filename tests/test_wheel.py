"""The installed package works: a wheel built from the tree, installed into a fresh venv outside it.

The wheel is built from a copy of what it packs (pyproject.toml, matrixbench/, runner/ and the
top-level templates/ and images/, which the wheel carries as matrixbench/_shipped/), so no
stale build/ folder of the checkout leaks into it. The commands run from a folder outside the tree
with PYTHONPATH cleared, and the test checks that matrixbench and runner were imported from the
venv: a missing template, Dockerfile or runner file fails here, not on a user's machine.
Dependencies come from pip's own configuration (index, find-links, cache), installed without
byte-compiling to keep it short.
"""
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.wheel

REPO = Path(__file__).resolve().parents[1]
FIXTURE = REPO / "tests" / "fixtures" / "cpu-docker-run"
GOLDEN = REPO / "tests" / "golden" / "cpu-docker-run.md"
PACKED = ("pyproject.toml", "matrixbench", "runner", "templates", "images")


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(venv python, a working folder outside the tree, the environment to run it with)."""
    root = tmp_path_factory.mktemp("wheel")
    wheel = _build_wheel(_copy_tree(root / "src"), root / "dist")
    venv = root / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", venv])
    python = venv / "bin" / "python"
    _run([sys.executable, "-m", "pip", "--python", python, "install", "--quiet", "--no-compile", wheel])
    work = root / "elsewhere"
    work.mkdir()
    env = {key: value for key, value in os.environ.items()
           if key not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    return python, work, env


def _copy_tree(src):
    src.mkdir()
    for name in PACKED:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(REPO / name, src / name)
    return src


def _build_wheel(src, dist):
    _run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
          "--wheel-dir", dist, src])
    (wheel,) = dist.glob("matrixbench-*.whl")
    return wheel


def _run(args, **kwargs):
    result = subprocess.run([str(arg) for arg in args], capture_output=True, text=True, **kwargs)
    assert result.returncode == 0, f"{args} exited {result.returncode}:\n{result.stdout}\n{result.stderr}"
    return result.stdout


def _in_venv(installed, *args):
    python, work, env = installed
    return _run([python, *args], cwd=work, env=env)


def test_matrixbench_and_runner_are_imported_from_the_venv(installed):
    python, work, _ = installed
    out = _in_venv(installed, "-c", "import matrixbench, runner; print(matrixbench.__file__); print(runner.__file__)")
    venv = python.parent.parent
    for line in out.splitlines():
        assert Path(line).is_relative_to(venv), f"{line} is not in the venv {venv}"
        assert not Path(line).is_relative_to(REPO)


def test_report_from_the_installed_package_matches_the_golden_file(installed):
    python, work, env = installed
    _run([python.parent / "matrixbench", "report", FIXTURE, "--out", "out", "--format", "md,html,csv"],
         cwd=work, env=env)
    assert (work / "out" / "report.md").read_text(encoding="utf-8") == GOLDEN.read_text(encoding="utf-8")
    html = (work / "out" / "report.html").read_text(encoding="utf-8")
    assert html.startswith("<!DOCTYPE html>") and "data:image/png;base64," in html
    header, *rows = (work / "out" / "results.csv").read_text(encoding="utf-8").splitlines()
    assert {"cell_id", "status"} <= set(header.split(","))
    records = [path for path in FIXTURE.glob("*/*.json") if path.name != "cells.json"]
    assert len(rows) == len(records) > 0
    assert list((work / "out" / "charts").glob("*.png"))


def test_the_console_script_builds_dry_run_from_the_installed_package(installed):
    python, work, env = installed
    args = [python.parent / "matrixbench", "build", "--dry-run", "--matrix", REPO / "matrix.yaml"]
    out = subprocess.run([str(arg) for arg in args], cwd=work, env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    out = out.stderr  # build progress goes to stderr
    assert "matrixbench:stable" in out and "matrixbench:latest" in out
    assert "--build-arg TORCH_SPEC=torch==2.0.1" in out


def test_the_build_context_comes_from_the_installed_package(installed):
    python, work, _ = installed
    script = ("import sys; from matrixbench.build import images; "
              "sys.stdout.buffer.write(images.build_context().getvalue())")
    (work / "context.tar").write_bytes(subprocess.run(
        [str(python), "-c", script], cwd=work, env=installed[2], capture_output=True, check=True).stdout)
    with tarfile.open(work / "context.tar") as tar:
        names = set(tar.getnames())
        dockerfile = tar.extractfile("Dockerfile").read().decode()
    assert {"Dockerfile", "ensure-toolchain.sh", "pip-install.sh", "ca-bundle.crt", "runner/__main__.py",
            "runner/schema.py", "runner/configs/vit/config.json"} <= names
    assert dockerfile == (REPO / "images" / "Dockerfile").read_text()


def test_the_wheel_carries_templates_and_images_inside_the_package(installed):
    out = _in_venv(installed, "-c", "from matrixbench import resources; print(resources.templates_dir()); "
                   "print(resources.docker_build_file('Dockerfile').parent)")
    templates, images = (Path(line) for line in out.splitlines())
    assert templates.parent.name == images.parent.name == "_shipped"
    assert {path.name for path in templates.iterdir()} == {path.name for path in (REPO / "templates").iterdir()}
    assert {path.name for path in images.iterdir()} == {path.name for path in (REPO / "images").iterdir()}
