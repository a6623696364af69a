"""Where a cell ran: versions, hardware, drivers, and the device actually used.

Runs in a cell's process (never in the forkserver, which must not touch CUDA).
"""
import platform
import re
import socket
import warnings

import torch
import transformers

from runner.archcheck import arch_problem
from runner.machine import cpu_model, gpu_devices_present, gpu_driver_version


def resolve_device(requested, image_name=None, cuda=None, gpus_present=None):
    """The device the cells use, or a RuntimeError saying why the GPU cannot be used.

    ``auto`` is cuda when a GPU is usable and cpu when the machine has none; on a machine
    whose NVIDIA devices torch cannot use (a driver too old for the build's CUDA, a GPU
    architecture the wheel has no kernels for) it is an error, never a silent CPU run.
    ``cuda`` and ``gpus_present`` are for tests (a fake torch.cuda; what /dev shows).
    """
    if requested == "cpu":
        return "cpu"
    cuda = cuda or torch.cuda
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        available = cuda.is_available()
    present = gpu_devices_present() if gpus_present is None else gpus_present
    if not available:
        if requested == "auto" and not present:
            return "cpu"
        raise RuntimeError(_unusable_message(requested, present, caught, image_name))
    problem = arch_problem(cuda.get_arch_list(), cuda.get_device_capability(0), cuda.get_device_name(0),
                           torch.__version__, image_name)
    if problem:
        raise RuntimeError(problem)
    return "cuda"


def _unusable_message(requested, present, caught, image_name):
    why = " ".join(str(w.message).strip().splitlines()[0] for w in caught if str(w.message).strip())
    where = f"image {image_name!r}: " if image_name else ""
    seen = "this machine has NVIDIA devices (/dev/nvidia*), but " if present else ""
    return (f"{where}settings.device is {requested!r}: {seen}torch {torch.__version__} (built for CUDA "
            f"{torch.version.cuda}) sees no usable GPU (driver {gpu_driver_version() or 'not found'})"
            f"{': ' + why if why else ''}. Fix: a driver new enough for CUDA {torch.version.cuda}, or an "
            "image built for the driver's CUDA version (its index_url); or run on the CPU with --device cpu")


def collect_environment(image_name=None, image_id=None):
    gpu_count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_git": getattr(torch.version, "git_version", None),
        "transformers": transformers.__version__,
        "cuda": torch.version.cuda,
        "cudnn": _cudnn_version(),
        "gpu_name": torch.cuda.get_device_name(0) if gpu_count else None,
        "gpu_capability": "%d.%d" % torch.cuda.get_device_capability(0) if gpu_count else None,
        "gpu_uuid": gpu_uuid() if gpu_count else None,
        "gpu_count": gpu_count,
        "driver": gpu_driver_version() if gpu_count else None,
        "cpu_model": cpu_model(),
        "threads": torch.get_num_threads(),
        "platform": platform.platform(),
        "hostname": socket.gethostname(),
        "image_name": image_name,
        "image_id": image_id,
    }


def gpu_uuid(cuda=None, nvml_uuid=None):
    """The UUID of the GPU the cells run on (torch's device 0), as nvidia-smi writes it
    ("GPU-..."): torch's device properties where they have it, else NVML's, else None."""
    cuda = cuda or torch.cuda
    value = getattr(cuda.get_device_properties(0), "uuid", None)
    if value is None:
        value = nvml_uuid() if nvml_uuid else _nvml_uuid()
    text = str(value) if value is not None else None
    return text if text is None or text.startswith(("GPU-", "MIG-")) else uuid_prefix(cuda) + text


def uuid_prefix(cuda):
    """"MIG-" for a MIG slice (its device name says "MIG", e.g. "NVIDIA A100-SXM4-40GB MIG 1g.5gb"),
    else "GPU-": nvidia-smi -L and CUDA_VISIBLE_DEVICES name a slice by its MIG- UUID."""
    name = getattr(cuda, "get_device_name", lambda index=0: "")(0) or ""
    return "MIG-" if re.search(r"\bMIG\b", str(name)) else "GPU-"


def _nvml_uuid():
    import os

    from runner.gpu_state import open_monitor

    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    uuid = visible if visible.startswith(("GPU-", "MIG-")) else None
    index = int(visible) if visible.isdigit() else 0
    monitor = open_monitor("cuda", visible_uuid=uuid, index=index)
    return monitor.uuid() if monitor else None


def _cudnn_version():
    try:
        return torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    except RuntimeError:
        return None
