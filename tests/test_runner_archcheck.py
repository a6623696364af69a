"""Torch build vs GPU architecture, bfloat16 support, and device resolution, against the
arch lists of each default image's torch (tests/data/gpu/arch_lists.json: written from
the build scripts, see its _about) and a fake torch.cuda."""
import json
import types
import warnings
from pathlib import Path

import pytest

from runner import cell as cell_module
from runner.archcheck import arch_problem, bf16_problem, parse_arch, runs_on
from runner.environment import resolve_device
from runner_cells import tiny_cell

ARCH_LISTS = json.loads((Path(__file__).parent / "data" / "gpu" / "arch_lists.json").read_text())
# Compute capabilities from NVIDIA's CUDA GPUs table (developer.nvidia.com/cuda-gpus).
GPUS = {"Tesla V100-SXM2-16GB": (7, 0), "Tesla T4": (7, 5), "NVIDIA A100-SXM4-80GB": (8, 0),
        "NVIDIA A10G": (8, 6), "NVIDIA L4": (8, 9), "NVIDIA H100 80GB HBM3": (9, 0),
        "NVIDIA B200": (10, 0), "NVIDIA GeForce RTX 5090": (12, 0)}


def test_parse_arch():
    assert parse_arch("sm_86") == ("sm", 8, 6, "")
    assert parse_arch("compute_90") == ("compute", 9, 0, "")
    assert parse_arch("sm_90a") == ("sm", 9, 0, "a")
    assert parse_arch("sm_100") == ("sm", 10, 0, "")
    assert parse_arch("gfx90a") is None


def test_compatibility_rules():
    assert runs_on("sm_86", (8, 9))          # same major, newer minor
    assert not runs_on("sm_86", (8, 0))      # older minor
    assert not runs_on("sm_80", (9, 0))      # cubins never cross a major
    assert runs_on("compute_80", (9, 0))     # PTX is compiled forward by the driver
    assert not runs_on("sm_90a", (9, 1)) and runs_on("sm_90a", (9, 0))


@pytest.mark.parametrize("image, gpu, ok", [
    ("stable", "Tesla T4", True), ("stable", "NVIDIA A100-SXM4-80GB", True),
    ("stable", "NVIDIA L4", True), ("stable", "NVIDIA H100 80GB HBM3", True),
    ("stable", "NVIDIA B200", False), ("nightly", "NVIDIA GeForce RTX 5090", False),
    ("latest", "NVIDIA B200", True), ("latest", "NVIDIA GeForce RTX 5090", True),
    ("latest", "Tesla V100-SXM2-16GB", True),
])
def test_each_images_torch_against_real_gpus(image, gpu, ok):
    entry = ARCH_LISTS[image]
    problem = arch_problem(entry["arch_list"], GPUS[gpu], gpu, entry["torch"], image)
    assert (problem is None) is ok
    if not ok:
        assert f"image {image!r}" in problem and gpu in problem
        assert "index_url" in problem and "download.pytorch.org/whl/cu1" in problem
        assert f"matrixbench build --images {image}" in problem


def test_cpu_build_is_not_an_arch_problem():
    assert arch_problem([], (9, 0), "NVIDIA H100 80GB HBM3", "2.13.0+cpu") is None


@pytest.mark.parametrize("gpu, refused", [("Tesla T4", True), ("Tesla V100-SXM2-16GB", True),
                                          ("NVIDIA A100-SXM4-80GB", False), ("NVIDIA L4", False)])
def test_bf16_needs_ampere(gpu, refused):
    problem = bf16_problem(GPUS[gpu], gpu)
    assert (problem is not None) is refused
    if refused:
        assert gpu in problem and "float16" in problem


def fake_cuda(available=True, gpu="NVIDIA A100-SXM4-80GB", arch_list=None, warning=None):
    def is_available():
        if warning:
            warnings.warn(warning, stacklevel=2)
        return available

    return types.SimpleNamespace(
        is_available=is_available, get_device_capability=lambda index=0: GPUS[gpu],
        get_device_name=lambda index=0: gpu,
        get_arch_list=lambda: ARCH_LISTS["stable"]["arch_list"] if arch_list is None else arch_list)


def test_auto_becomes_cuda_when_usable_and_cpu_only_without_gpus():
    assert resolve_device("auto", cuda=fake_cuda(), gpus_present=True) == "cuda"
    assert resolve_device("auto", cuda=fake_cuda(available=False), gpus_present=False) == "cpu"
    assert resolve_device("cpu", cuda=fake_cuda(), gpus_present=True) == "cpu"


def test_auto_on_a_gpu_machine_that_torch_cannot_use_is_an_error_with_the_reason():
    old_driver = ("The NVIDIA driver on your system is too old (found version 11040). Please update "
                  "your GPU driver by downloading and installing a new version from the URL: ...")
    with pytest.raises(RuntimeError) as error:
        resolve_device("auto", "stable", cuda=fake_cuda(available=False, warning=old_driver), gpus_present=True)
    message = str(error.value)
    assert "image 'stable'" in message and "too old (found version 11040)" in message
    assert "--device cpu" in message


def test_auto_with_a_gpu_the_wheel_has_no_kernels_for_is_an_error():
    with pytest.raises(RuntimeError, match="NVIDIA B200.*compute capability 10.0"):
        resolve_device("auto", "stable", cuda=fake_cuda(gpu="NVIDIA B200"), gpus_present=True)


def test_cuda_without_a_gpu_is_an_error():
    with pytest.raises(RuntimeError, match="sees no usable GPU"):
        resolve_device("cuda", cuda=fake_cuda(available=False), gpus_present=False)


def test_bf16_cell_refused_on_a_t4_and_allowed_on_cpu():
    with pytest.raises(cell_module.UnsupportedOnThisGpu, match="Tesla T4"):
        cell_module.refuse_unsupported(tiny_cell(dtype="bfloat16"), "cuda", cuda=fake_cuda(gpu="Tesla T4"))
    cell_module.refuse_unsupported(tiny_cell(dtype="bfloat16"), "cuda", cuda=fake_cuda(gpu="NVIDIA L4"))
    cell_module.refuse_unsupported(tiny_cell(dtype="bfloat16"), "cpu")


def test_gpu_uuid_from_torch_or_nvml():
    from runner.environment import gpu_uuid

    with_uuid = types.SimpleNamespace(get_device_properties=lambda i: types.SimpleNamespace(
        uuid="5f0e1d2c-3b4a-5968-7a6b-8c9d0e1f2a3b"))
    assert gpu_uuid(with_uuid) == "GPU-5f0e1d2c-3b4a-5968-7a6b-8c9d0e1f2a3b"
    without = types.SimpleNamespace(get_device_properties=lambda i: types.SimpleNamespace())
    assert gpu_uuid(without, nvml_uuid=lambda: "GPU-7e2a9c4b") == "GPU-7e2a9c4b"
    assert gpu_uuid(without, nvml_uuid=lambda: None) is None
    mig = types.SimpleNamespace(get_device_name=lambda i=0: "NVIDIA A100-SXM4-40GB MIG 1g.5gb",
                                get_device_properties=lambda i: types.SimpleNamespace(uuid="3c1f2e4d-aaaa-bbbb"))
    assert gpu_uuid(mig) == "MIG-3c1f2e4d-aaaa-bbbb"   # a MIG slice's UUID, as nvidia-smi -L names it


@pytest.mark.parametrize("triton, gpu, mode, refused", [
    ("2.0.0", "NVIDIA H100 80GB HBM3", "max-autotune", True),     # stable's Triton on Hopper: SIGABRT
    ("2.1.0", "NVIDIA H100 80GB HBM3", "max-autotune", False),
    ("2.0.0", "NVIDIA A100-SXM4-80GB", "max-autotune", False),
    ("2.0.0", "NVIDIA H100 80GB HBM3", "default", False),
    ("3.5.0", "NVIDIA B200", "max-autotune", False),
])
def test_max_autotune_with_triton_2_0_on_hopper_is_refused_before_running(triton, gpu, mode, refused):
    cell = tiny_cell(mode=mode)
    if not refused:
        cell_module.refuse_unsupported(cell, "cuda", cuda=fake_cuda(gpu=gpu), triton_version=triton)
        return
    with pytest.raises(cell_module.UnsupportedOnThisGpu, match=r"max-autotune refused on NVIDIA H100.*Triton 2\.0\.0"
                       r".*SIGABRT.*Triton 2\.1 or newer"):
        cell_module.refuse_unsupported(cell, "cuda", cuda=fake_cuda(gpu=gpu), triton_version=triton)


def test_the_refusal_reads_the_images_triton(monkeypatch):
    monkeypatch.setattr(cell_module, "_triton_version", lambda: "2.0.0")
    with pytest.raises(cell_module.UnsupportedOnThisGpu, match="Triton 2.0.0"):
        cell_module.refuse_unsupported(tiny_cell(mode="max-autotune"), "cuda",
                                       cuda=fake_cuda(gpu="NVIDIA H100 80GB HBM3"))
