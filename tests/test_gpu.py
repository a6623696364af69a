"""The host's GPUs from `nvidia-smi -L`, with nvidia-smi faked (no GPU here)."""
import subprocess

from matrixbench import gpu

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


def test_host_gpus_runs_nvidia_smi_list(monkeypatch):
    calls = []

    def run(args, **kwargs):
        calls.append(args)
        return subprocess.CompletedProcess(args, 0, stdout=LISTING, stderr="")

    monkeypatch.setattr(gpu.shutil, "which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(gpu.subprocess, "run", run)
    assert len(gpu.host_gpus()) == 2
    assert calls == [["nvidia-smi", "-L"]]


def test_no_nvidia_smi_or_a_failing_one_means_no_gpus(monkeypatch):
    monkeypatch.setattr(gpu.shutil, "which", lambda name: None)
    assert gpu.host_gpus() == []
    monkeypatch.setattr(gpu.shutil, "which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(gpu.subprocess, "run",
                        lambda args, **kwargs: subprocess.CompletedProcess(args, 9, stdout=LISTING, stderr="driver"))
    assert gpu.host_gpus() == []
