"""The NVIDIA driver and the GPUs it lists (``nvidia-smi``, asked through ``matrixbench.gpu``), and the CUDA
version the driver supports."""
from matrixbench.build.cuda_builds import driver_cuda_version
from matrixbench.doctor.backend import skipped_by_variable
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


def left_out(driver, gpus, skip):
    """The driver's line where MATRIXBENCH_AUTO_SKIP skips the GPUs (``skip``): information, never a failure (a run
    here uses the CPU), saying what nvidia-smi found and that the GPUs are left out, and why. The driver's line is
    "info" only then (checkup.measure_device reads it so)."""
    found = driver.detail if gpus else f"{driver.detail}, and none is needed"
    return Check(DRIVER, "info", f"{found}; left out: {skipped_by_variable('GPUs', skip)}, as `run --backend auto` "
                 "leaves them out: the builds below are checked for the CPU, which a run here uses, and no GPU check "
                 "follows")
