"""Each image's CUDA build against this host's driver and GPUs, before anything is built or run.

An image's torch is a CUDA build: the ``cuXYZ`` of its ``index_url``, or (no index_url) the CUDA
build PyPI serves for that torch version. A build runs when the driver supports its CUDA major
(``runner.archcheck.driver_runs``: 12.x on any driver from 525 on, 13.x from 580 on) and carries
kernels for every GPU (``runner.archcheck.WHEEL_ARCHES``). ``doctor``, ``validate`` and ``build``
ask ``image_problems``; ``refuse_on_this_host`` raises with the fix. The driver's newest CUDA
comes from ``nvidia-smi``'s header (as NVML's ``nvmlSystemGetCudaDriverVersion`` gives it). Stdlib only.
"""
import re
from dataclasses import dataclass
from typing import List, Optional

from matrixbench.errors import MatrixbenchError
from matrixbench.gpu import host_gpus, run_command
from runner.archcheck import WHEEL_ARCHES, driver_runs, index_url, runs_on, suggested_cuda, triton_problem

# The CUDA build of PyPI's Linux torch wheels by torch minor version (the newest CUDA of each
# release; 2.10 on: 13.0, which needs driver 580 and has no Volta kernels).
PYPI_CUDA = {(2, 0): "11.7", (2, 1): "12.1", (2, 2): "12.1", (2, 3): "12.1", (2, 4): "12.1",
             (2, 5): "12.4", (2, 6): "12.4", (2, 7): "12.6", (2, 8): "12.8", (2, 9): "12.8"}
PYPI_NEWEST_CUDA = "13.0"
CPU_BUILD = re.compile(r"/(cpu|rocm[0-9.]*|xpu)/?$")


class CudaBuildError(MatrixbenchError):
    """An image's CUDA build cannot run on this host's driver or GPUs."""

    exit_code = 2


@dataclass(frozen=True)
class Problem:
    image: str
    what: str
    fix: str


def image_cuda(image) -> Optional[str]:
    """The CUDA version of an image's torch build ("12.8"); None for a CPU (or ROCm) build."""
    url = (image.index_url or "").rstrip("/")
    match = re.search(r"/cu(\d+)(\d)$", url)
    if match:
        return f"{match.group(1)}.{match.group(2)}"
    if CPU_BUILD.search(url) or (image.torch_version or "").endswith("+cpu"):
        return None
    return pypi_cuda(image.torch_version)


def pypi_cuda(torch_version: Optional[str]) -> str:
    """The CUDA build of PyPI's Linux wheel of ``torch_version`` ("2.13.0" -> "13.0")."""
    numbers = re.match(r"(\d+)\.(\d+)", torch_version or "")
    if numbers is None:
        return PYPI_NEWEST_CUDA
    return PYPI_CUDA.get((int(numbers.group(1)), int(numbers.group(2))), PYPI_NEWEST_CUDA)


def driver_cuda_version(nvidia_smi_text: str) -> Optional[str]:
    """The newest CUDA the driver supports, from plain ``nvidia-smi``'s header ("CUDA Version: 12.4")."""
    match = re.search(r"CUDA Version:\s*([0-9]+\.[0-9]+)", nvidia_smi_text)
    return match.group(1) if match else None


def host_driver_cuda(run=None) -> Optional[str]:
    code, text = (run or run_command)(["nvidia-smi"])
    return driver_cuda_version(text) if code == 0 else None


def image_problems(name, image, gpus, driver_cuda) -> List[Problem]:
    """Why image ``name``'s CUDA build cannot run on these GPUs under this driver, each with its fix."""
    cuda = image_cuda(image)
    if cuda is None or not gpus:
        return []
    problems = []
    if driver_cuda and not driver_runs(cuda, driver_cuda):
        problems.append(Problem(name, f"{image.torch} is a CUDA {cuda} build{_pypi(image)}, which needs a driver "
                                f"for CUDA {cuda.split('.')[0]}.x (this driver supports CUDA up to {driver_cuda})",
                                _fix(name, gpus[0].capability, driver_cuda, "for this driver")))
    arches = WHEEL_ARCHES.get(cuda, [])
    for gpu in gpus:
        if arches and gpu.capability and not any(runs_on(arch, gpu.capability) for arch in arches):
            major, minor = gpu.capability
            problems.append(Problem(name, f"{image.torch} (CUDA {cuda}{_pypi(image)}) has no kernels for {gpu.name} "
                                    f"(compute capability {major}.{minor}; it carries {' '.join(arches)})",
                                    _fix(name, gpu.capability, driver_cuda, f"for the {gpu.name}")))
            break
    return problems


def _pypi(image):
    return "" if image.index_url else " (PyPI's wheel: no index_url)"


def _fix(name, capability, driver_cuda, why):
    cuda = suggested_cuda(capability, driver_cuda) if capability else suggested_cuda((9, 0), driver_cuda)
    if cuda is None:
        return f"update the NVIDIA driver, or give images.{name}.index_url a CUDA build that runs here"
    return (f"use index_url {index_url(cuda)} {why} (images.{name}.index_url in the matrix, with a torch "
            f"version served there), then `matrixbench build --images {name}`")


def host_problems(matrix, names, run=None) -> List[Problem]:
    """The problems of the named images on this host; [] on a host without NVIDIA GPUs."""
    gpus = host_gpus(run)
    if not gpus:
        return []
    driver_cuda = host_driver_cuda(run)
    return [problem for name in names for problem in image_problems(name, matrix.images[name], gpus, driver_cuda)]


def refuse_on_this_host(matrix, names, run=None):
    """Raise CudaBuildError naming every image that cannot run on this host's driver/GPUs and its fix."""
    problems = host_problems(matrix, names, run)
    if problems:
        raise CudaBuildError("these images' CUDA builds cannot run on this machine:\n" + "\n".join(
            f"  image {p.image}: {p.what}\n    fix: {p.fix}" for p in problems))


def mode_problems(name, image, gpus, modes) -> List[Problem]:
    """Cells of image ``name`` the runner will refuse on these GPUs: max-autotune with torch 2.0's
    Triton 2.0 on Hopper (runner.archcheck.triton_problem), said before the run starts."""
    if "max-autotune" not in modes or not (image.torch_version or "").startswith("2.0."):
        return []
    for gpu in gpus:
        if gpu.capability and triton_problem("2.0.0", gpu.capability, gpu.name, "max-autotune"):
            return [Problem(name, f"its max-autotune cells will be refused on {gpu.name}: torch "
                            f"{image.torch_version}'s Triton 2.0 cannot compile Inductor's matmul templates for "
                            f"compute capability {gpu.capability[0]}.{gpu.capability[1]}",
                            f"drop max-autotune for images.{name} (--modes), or time it on a GPU before Hopper")]
    return []
