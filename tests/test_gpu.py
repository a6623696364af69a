"""The host's GPUs from nvidia-smi (faked: no GPU here), asked in one place, matrixbench.gpu."""
import ast
import subprocess
from pathlib import Path

import matrixbench
from matrixbench import gpu
from matrixbench.environments.local import LocalBackend

DATA = Path(__file__).parent / "data" / "gpu" / "nvidia-smi"
# The format of `nvidia-smi -L` (one line per GPU, then MIG devices indented); the UUIDs are made up.
LISTING = (
    "GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-00000000-0000-0000-0000-000000000000)\n"
    "  MIG 1g.5gb Device 0: (UUID: MIG-00000000-0000-0000-0000-000000000001)\n"
    "GPU 1: Tesla T4 (UUID: GPU-00000000-0000-0000-0000-000000000002)\n"
)


def test_gpu_lines_keeps_the_gpu_lines_only():
    assert gpu.gpu_lines(LISTING) == [
        "GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-00000000-0000-0000-0000-000000000000)",
        "GPU 1: Tesla T4 (UUID: GPU-00000000-0000-0000-0000-000000000002)",
    ]
    assert gpu.gpu_lines("No devices were found\n") == []


def test_host_gpus_are_the_documented_query_gpu_csv(monkeypatch):
    calls = []

    def run(argv, **kwargs):
        calls.append(argv)
        return subprocess.CompletedProcess(argv, 0, stdout=(DATA / "h100-query-gpu.csv").read_text(), stderr="")

    monkeypatch.setattr(gpu.shutil, "which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(gpu.subprocess, "run", run)
    found = gpu.host_gpus()
    assert [g.name for g in found] and all(g.uuid.startswith("GPU-") for g in found)
    assert calls == [list(gpu.QUERY_GPUS)]
    assert LocalBackend().gpus_available()


def test_no_nvidia_smi_or_a_failing_one_means_no_gpus(monkeypatch):
    monkeypatch.setattr(gpu.shutil, "which", lambda name: None)
    assert gpu.host_gpus() == [] and gpu.query_gpus() is None and gpu.compute_apps() == []
    monkeypatch.setattr(gpu.shutil, "which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(gpu.subprocess, "run",
                        lambda args, **kwargs: subprocess.CompletedProcess(args, 9, stdout="", stderr="driver"))
    assert gpu.host_gpus() == [] and gpu.query_gpus() == []


def test_compute_apps_are_the_query_lines():
    text = (DATA / "apps-busy.csv").read_text()
    apps = gpu.compute_apps(lambda argv: (0, text) if argv == list(gpu.QUERY_APPS) else (9, ""))
    assert apps == [line.strip() for line in text.splitlines() if line.strip()] and apps


def test_only_matrixbench_gpu_queries_the_host_gpus():
    # doctor.py once ran its own `nvidia-smi --query-gpu` beside gpu.py's host_gpus (and
    # run/placement.py its own again): every nvidia-smi query is spelled in gpu.py alone.
    package = Path(matrixbench.__file__).parent
    spelled = sorted({path.name for path in package.rglob("*.py")
                      for node in ast.walk(ast.parse(path.read_text()))
                      if isinstance(node, ast.Constant) and isinstance(node.value, str)
                      and node.value.startswith("--query-")})   # an argv item, not a help text
    assert spelled == ["gpu.py"]
