"""Where a cell ran: versions, hardware, drivers, and the device actually used.

Runs in a cell's process (never in the forkserver, which must not touch CUDA).
"""
import platform
import socket

import torch
import transformers

from runner.machine import cpu_model, gpu_driver_version


def resolve_device(requested):
    """``auto`` means cuda when a GPU is usable, else cpu; ``cuda`` without a GPU is an error."""
    if requested == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if requested == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("settings.device is 'cuda' but torch sees no usable GPU "
                           f"(torch {torch.__version__}, built for CUDA {torch.version.cuda}); "
                           "use device 'auto' or 'cpu'")
    return requested


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
        "gpu_count": gpu_count,
        "driver": gpu_driver_version() if gpu_count else None,
        "cpu_model": cpu_model(),
        "threads": torch.get_num_threads(),
        "platform": platform.platform(),
        "hostname": socket.gethostname(),
        "image_name": image_name,
        "image_id": image_id,
    }


def _cudnn_version():
    try:
        return torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    except RuntimeError:
        return None
