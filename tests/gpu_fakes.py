"""Fake hosts for the GPU-only paths: nvidia-smi outputs in their real formats for drivers 535, 550,
570 and 580 on an H100, A100, V100 and T4.

WRITTEN FROM NVIDIA'S DOCUMENTED FORMATS, not recorded (no GPU machine was available): the plain
``nvidia-smi`` header (``Driver Version: X   CUDA Version: Y.Z``, as in tests/data/gpu/nvidia-smi/),
``--query-gpu=...--format=csv,noheader,nounits`` lines (``, `` separated), ``-L`` lines. The
drivers' CUDA versions are those NVIDIA's release notes give for each branch (535: 12.2, 550: 12.4,
570: 12.8, 580: 13.0); names, compute capabilities and max clocks are those the GPUs report.
"""
from dataclasses import dataclass

# branch -> (full driver version, the newest CUDA it supports)
DRIVERS = {"535": ("535.183.01", "12.2"), "550": ("550.127.05", "12.4"),
           "570": ("570.133.20", "12.8"), "580": ("580.82.07", "13.0")}


@dataclass(frozen=True)
class FakeGpuModel:
    name: str
    capability: str
    sm_max: int
    mem_max: int


GPUS = {
    "H100": FakeGpuModel("NVIDIA H100 80GB HBM3", "9.0", 1980, 2619),
    "A100": FakeGpuModel("NVIDIA A100-SXM4-80GB", "8.0", 1410, 1593),
    "V100": FakeGpuModel("Tesla V100-SXM2-16GB", "7.0", 1530, 877),
    "T4": FakeGpuModel("Tesla T4", "7.5", 1590, 5001),
}


def header(driver):
    version, cuda = DRIVERS[driver]
    return ("Tue Nov 24 05:40:12 2026       \n"
            "+-----------------------------------------------------------------------------------------+\n"
            f"| NVIDIA-SMI {version:<22} Driver Version: {version:<14} CUDA Version: {cuda:<9}|\n"
            "|-----------------------------------------+------------------------+----------------------+\n")


def query_gpu(gpu, driver, count=1):
    model, (version, _) = GPUS[gpu], DRIVERS[driver]
    return "".join(f"{i}, {model.name}, GPU-{i:08x}-5e4f-3a2b-1c0d-e9f8a7b6c5d4, {version}, {model.capability}, "
                   f"Enabled, 345, {model.sm_max}, {model.mem_max}, {model.mem_max}\n" for i in range(count))


def list_gpus(gpu, count=1):
    return "".join(f"GPU {i}: {GPUS[gpu].name} (UUID: GPU-{i:08x}-5e4f-3a2b-1c0d-e9f8a7b6c5d4)\n"
                   for i in range(count))


def nvidia_smi(gpu, driver, count=1, apps=""):
    """A ``run(argv) -> (exit code, stdout)`` replaying nvidia-smi on this host; gpu None: no nvidia-smi."""
    def run(argv):
        if gpu is None or argv[0] != "nvidia-smi":
            return None, ""
        if argv == ["nvidia-smi"]:
            return 0, header(driver)
        if argv[1] == "-L":
            return 0, list_gpus(gpu, count)
        if argv[1].startswith("--query-gpu=index,name"):
            return 0, query_gpu(gpu, driver, count)
        if argv[1].startswith("--query-compute-apps="):
            return 0, apps
        raise AssertionError(argv)
    return run
