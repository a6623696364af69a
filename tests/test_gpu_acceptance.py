"""benchmarks/gpu_acceptance.sh in its dry mode, on fake nvidia-smi outputs (tests/gpu_fakes.py): the
GPU check, the matrix it writes, and every command it would run. No GPU was available to run it for
real (docs/gpu.md says how to)."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpu_fakes import GPUS
from matrixbench.matrix import load_matrix
from runner.models import SEED_MODELS

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu_acceptance.sh"


def dry_run(tmp_path, names, **environ):
    """The script with an nvidia-smi listing ``names`` (None: no nvidia-smi at all); its results in
    tmp_path/out (RESULTS), ``environ`` added (MODELS, REPEATS, ...)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    if names is not None:
        smi = bin_dir / "nvidia-smi"
        smi.write_text("#!/bin/sh\n" + "".join(f"echo '{name}'\n" for name in names))
        smi.chmod(0o755)
    path = os.pathsep.join([str(bin_dir), "/usr/bin", "/bin"])
    env = dict(os.environ, PATH=path, PYTHON=sys.executable, RESULTS=str(tmp_path / "out"), **environ)
    return subprocess.run(["sh", str(SCRIPT), "--dry-run"], env=env, capture_output=True, text=True, timeout=120)


def test_one_gpu_gets_the_wheels_selftest_the_seed_models_the_report_and_the_harness_benchmark(tmp_path):
    done = dry_run(tmp_path, [GPUS["H100"].name])
    assert done.returncode == 0, done.stderr
    commands = [line for line in done.stdout.splitlines() if line.startswith("+ ")]
    assert len(commands) == 6, commands
    # the missing pure-Python dependencies, unpacked from .whl onto PYTHONPATH (no venv, no build backend)
    assert "-m pip install" in commands[0] and "--no-index --no-deps" in commands[0]
    assert "--target" in commands[0] and " .whl/" in commands[0] and commands[0].endswith(".whl")
    assert "matrixbench.cli selftest" in commands[1] and "--device cuda" in commands[1]
    # issue 34's A/A through the product, without and with turns, before the matrix (the budget may not reach it)
    assert "bench_turns_aa.py" in commands[2] and "--models resnet --modes eager --repeats 10" in commands[2]
    assert "--designs pinned --pin 1" in commands[2]     # the default design (docs/turns.md)
    assert "--device cuda --backend local" in commands[2]
    assert "matrixbench.cli run" in commands[3] and "--backend local --device cuda" in commands[3]
    assert "--models resnet,vit" in commands[3]
    assert "matrixbench.cli report" in commands[4]
    assert "bench_harness_vs_plain.py --device cuda" in commands[5]
    matrix = load_matrix(tmp_path / "out" / "acceptance.yaml")
    assert set(matrix.models) == set(load_matrix(ROOT / "matrix.yaml").models) <= set(SEED_MODELS)
    assert {"resnet", "vit"} <= set(matrix.models)   # --models picks them from the seed models
    assert matrix.size == "full"
    assert matrix.batch_sizes == (1,) and matrix.modes == ("eager", "default", "reduce-overhead")
    assert matrix.repeats == 2 and list(matrix.images) == ["latest"]
    import torch

    assert matrix.images["latest"].torch_version == torch.__version__.split("+")[0]   # what --backend local runs
    assert not (tmp_path / "out" / "not-reached.txt").read_text()   # a dry run reaches nothing and lists nothing


def test_the_turns_aa_step_is_skipped_with_an_empty_turns_aa(tmp_path):
    done = dry_run(tmp_path, [GPUS["H100"].name], TURNS_AA="")
    assert done.returncode == 0, done.stderr
    assert not any("bench_turns_aa.py" in line for line in done.stdout.splitlines())


def test_models_and_repeats_come_from_the_environment(tmp_path):
    done = dry_run(tmp_path, [GPUS["H100"].name], MODELS="detr-resnet-101", REPEATS="3")
    assert done.returncode == 0, done.stderr
    run = next(line for line in done.stdout.splitlines() if "matrixbench.cli run" in line)
    assert "--models detr-resnet-101" in run
    assert load_matrix(tmp_path / "out" / "acceptance.yaml").repeats == 3


@pytest.mark.parametrize("names", [None, [], [GPUS["A100"].name] * 2])
def test_anything_but_one_gpu_is_refused(tmp_path, names):
    done = dry_run(tmp_path, names)
    assert done.returncode == 2 and "needs exactly one NVIDIA GPU" in done.stderr


def test_the_harness_benchmark_takes_the_gpu_on_both_sides(monkeypatch):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import bench_harness_vs_plain as harness

    args = harness.parse(["--device", "cuda"])
    assert args.device == "cuda" and harness.parse([]).device == "cpu"
    seen = []
    monkeypatch.setattr(harness.subprocess, "run", lambda argv, **kw: seen.append(argv) or
                        type("Done", (), {"stdout": '{"mean_ms": 1.0}\n'})())
    harness.run_plain("resnet", "eager", args, {})
    assert seen[0][seen[0].index("--device") + 1] == "cuda"


def test_a_cpu_rehearsal_needs_no_gpu_and_takes_the_cpu_in_every_step(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    env = dict(os.environ, PATH=os.pathsep.join([str(bin_dir), "/usr/bin", "/bin"]), PYTHON=sys.executable,
               RESULTS=str(tmp_path / "out"), DEVICE="cpu")
    done = subprocess.run(["sh", str(SCRIPT), "--dry-run"], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr          # no nvidia-smi on PATH, and no refusal
    commands = [line for line in done.stdout.splitlines() if line.startswith("+ ")]
    assert [("--device cpu" in command) for command in commands[1:]] == [True, True, True, False, True]
    assert not any("--device cuda" in command for command in commands)
