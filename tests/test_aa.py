"""run --aa IMAGE (issue 21): one image twice under two names, one build, interleaved; run.json's
aa_twins and the twin's records carry what the report's false-alarm line needs."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from host_helpers import RecordingBackend, local_run_options, use_backend, write_matrix
from matrixbench.build.venvs import plan_venv, venvs_root
from matrixbench.cli import main
from matrixbench.errors import MatrixError
from matrixbench.matrix import Overrides, load_matrix
from matrixbench.matrix.aa import aa_matrix
from matrixbench.run.command import run_matrix
from matrixbench.run.manifest import read_manifest
from runner.schema import read_record

AA_RATE = (r"\(a simulator of known truth stars [\d.]+% of them at \d+ vs \d+ processes"
           r"(?: paired by round| in turns)?; nominal 5%\)")
REPO = Path(__file__).resolve().parents[1]


def test_the_twin_is_the_same_build_under_another_name(tmp_path):
    matrix = aa_matrix(load_matrix(write_matrix(tmp_path), Overrides(repeats=3)), "stable")
    assert list(matrix.images) == ["stable", "stable-aa"]
    original, twin = matrix.images["stable"], matrix.images["stable-aa"]
    assert twin.build_of == "stable" and twin.torch == original.torch
    assert twin.content_hash() == original.content_hash()
    assert plan_venv(twin).path == plan_venv(original).path          # one venv, never a second build


@pytest.mark.parametrize("image, repeats, says", [("nope", 3, "no such image"), ("stable", 1, "--repeats 3")])
def test_refused_aa_runs_name_the_fix(tmp_path, image, repeats, says):
    with pytest.raises(MatrixError, match=says):
        aa_matrix(load_matrix(write_matrix(tmp_path), Overrides(repeats=repeats)), image)


def test_an_aa_run_interleaves_the_twin_in_the_originals_build_and_run_json_names_it(tmp_path, monkeypatch):
    backend = use_backend(monkeypatch, RecordingBackend())
    matrix = aa_matrix(load_matrix(write_matrix(tmp_path), Overrides(repeats=2, models=["vit"], batch_sizes=[1])),
                       "latest")
    run_matrix(matrix, local_run_options(tmp_path, order_seed=3))
    turns = [(request.image.name, request.image.built_as, request.repeats()[0].index) for request in backend.requests]
    assert turns == [("latest", "latest", 0), ("latest-aa", "latest", 0),
                     ("latest-aa", "latest", 1), ("latest", "latest", 1)]
    run_path = tmp_path / "results" / "r1"
    assert read_manifest(run_path)["aa_twins"] == {"latest-aa": "latest"}
    assert len(list((run_path / "latest-aa").glob("vit*.json"))) == 4


def test_cli_aa_dry_run_lists_both_names_in_a_run_of_its_own(tmp_path):
    result = CliRunner().invoke(main, ["run", "--matrix", str(write_matrix(tmp_path)), "--aa", "stable",
                                       "--repeats", "2", "--models", "vit", "--batch-sizes", "1",
                                       "--results", str(tmp_path / "results"), "--dry-run"])
    assert result.exit_code == 0, result.output
    assert f"stable: 4 to run, 0 done -> {tmp_path / 'results' / 'aa-stable' / 'stable'}" in result.output
    assert f"stable-aa: 4 to run, 0 done -> {tmp_path / 'results' / 'aa-stable' / 'stable-aa'}" in result.output
    assert "estimated duration" in result.output


def _cli(*args, cwd):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-m", "matrixbench.cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=1800, check=False)
    return done.returncode, done.stdout + done.stderr


def _check_aa_run(run_path, image, output):
    """Both names ran every process ok, the twin's records name the twin, run.json names the pair;
    the report builds from it."""
    assert read_manifest(run_path)["aa_twins"] == {f"{image}-aa": image}
    torch = set()
    for name in (image, f"{image}-aa"):
        records = [read_record(path) for path in sorted((run_path / name).glob("resnet-tiny_*.json"))]
        assert len(records) == 2 and all(r["status"] == "ok" for r in records), output
        assert {r["environment"]["image_name"] for r in records} == {name}
        torch |= {r["environment"]["torch"] for r in records}
    assert len(torch) == 1            # one build: the same torch on both sides
    code, report = _cli("report", str(run_path), "--out", str(run_path.parent / "report"), "--format", "md",
                        cwd=run_path.parent)
    assert code == 0, report
    return (run_path.parent / "report" / "report.md").read_text()


AA_ARGS = ("--models", "resnet", "--modes", "eager", "--iterations", "3", "--warmup", "1", "--repeats", "2",
           "--device", "cpu")


@pytest.mark.slow
def test_aa_end_to_end_with_the_local_backend(tmp_path):
    code, output = _cli("run", "--matrix", str(REPO / "matrix-cpu-smoke.yaml"), "--aa", "latest", *AA_ARGS,
                        "--backend", "local", "--cache-dir", str(tmp_path / "cache"), cwd=tmp_path)
    assert code == 0, output
    report = _check_aa_run(tmp_path / "results" / "aa-latest", "latest", output)
    assert re.search(r"On this machine, (0 of 1 no-change \(A/A\) comparison were|"
                     r"1 of 1 no-change \(A/A\) comparison was) starred " + AA_RATE + r"\.", report)
    # matrix-cpu-smoke.yaml says nothing of turns: the A/A ran in turns (the default), its blocks on one core
    assert re.search(r"processes in turns; nominal 5%", report)
    twin = [read_record(path) for path in (tmp_path / "results" / "aa-latest" / "latest-aa").glob("resnet-tiny_*.json")]
    assert twin and all(r["timing"]["turns"]["partner"] == "latest" and len(r["timing"]["turns"]["cores"]) == 1
                        for r in twin)


@pytest.mark.venv
def test_aa_end_to_end_with_the_venv_backend_reuses_the_one_venv(tmp_path, venv_e2e_builds):
    """venv-latest's venv comes from the session's build (tests/conftest.py), whichever test file asked first."""
    matrix_path = REPO / "tests" / "data" / "venv-matrix.yaml"
    venv = plan_venv(load_matrix(matrix_path).images["venv-latest"])
    assert venv_e2e_builds["venv-latest"] is not None and venv_e2e_builds["venv-latest"].path == venv.path
    before = sorted(path.name for path in venvs_root().iterdir())
    code, output = _cli("run", "--matrix", str(matrix_path), "--aa", "venv-latest", *AA_ARGS, "--backend", "venv",
                        "--cache-dir", str(tmp_path / "cache"), cwd=tmp_path)
    assert code == 0, output
    assert f"using {venv.path}" in output and "creating" not in output
    assert sorted(path.name for path in venvs_root().iterdir()) == before      # nothing built
    report = _check_aa_run(tmp_path / "results" / "aa-venv-latest", "venv-latest", output)
    assert re.search(r"On this machine, (0 of 1 no-change \(A/A\) comparison were|"
                     r"1 of 1 no-change \(A/A\) comparison was) starred " + AA_RATE + r"\.", report)


def test_the_report_of_an_aa_run_prints_its_false_alarm_line(tmp_path, monkeypatch):
    """Records from a stand-in backend, run.json from the real run path: the report counts the twin's
    comparisons with its original, and only those."""
    from matrixbench.report import build_report

    use_backend(monkeypatch, RecordingBackend())
    matrix = aa_matrix(load_matrix(write_matrix(tmp_path), Overrides(repeats=3, batch_sizes=[1])), "latest")
    run_matrix(matrix, local_run_options(tmp_path, order_seed=3))
    build_report([tmp_path / "results" / "r1"], tmp_path / "report", ["md"])
    report = (tmp_path / "report" / "report.md").read_text()
    # 2 models x 2 modes, every process the same 2.5 ms: no spread, nothing starred
    assert re.search(r"On this machine, 0 of 4 no-change \(A/A\) comparisons were starred "
                     + AA_RATE + r"\.", report)
