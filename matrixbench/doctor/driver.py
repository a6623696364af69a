"""The NVIDIA driver and the GPUs it lists (``nvidia-smi``, asked through ``matrixbench.gpu``), and the CUDA
version the driver supports."""
from matrixbench.build.cuda_builds import driver_cuda_version
from matrixbench.doctor.check import Check
from matrixbench.gpu import query_gpus

DRIVER = "driver and GPUs"


def check_driver(commands):
    gpus = query_gpus(commands.run)
    if not gpus:
        return [], Check(DRIVER, "fail", "nvidia-smi finds no NVIDIA GPU" if gpus is not None
                         else "nvidia-smi is not installed",
                         "install the NVIDIA driver (e.g. `sudo apt-get install nvidia-driver-550`), reboot, "
                         "and check that `nvidia-smi` lists the GPUs")
    listing = "; ".join(f"{g.index}: {g.name} ({g.uuid})" for g in gpus)
    return gpus, Check(DRIVER, "ok", f"driver {gpus[0].driver}, {len(gpus)} GPU(s): {listing}")


def check_driver_cuda(commands):
    code, text = commands.run(["nvidia-smi"])
    version = driver_cuda_version(text) if code == 0 else None
    if version is None:
        return None, Check("driver CUDA version", "warn", "nvidia-smi does not say which CUDA it supports",
                           "update the NVIDIA driver")
    return version, Check("driver CUDA version", "ok", f"the driver supports CUDA up to {version}")
