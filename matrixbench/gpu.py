"""Does this host have NVIDIA GPUs? Asked of nvidia-smi, never of torch (the host has none)."""
import shutil
import subprocess

# `nvidia-smi -L`: one "GPU 0: NAME (UUID: GPU-...)" line per GPU, on the host or in a container.
LIST_GPUS = ("nvidia-smi", "-L")


def gpu_lines(listing):
    """The GPU lines of ``nvidia-smi -L`` output, stripped."""
    return [line.strip() for line in listing.splitlines() if line.startswith("GPU ")]


def host_gpus():
    """Names of the host's NVIDIA GPUs from ``nvidia-smi -L``; [] when there is none or no driver."""
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        listing = subprocess.run(list(LIST_GPUS), capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return []
    if listing.returncode != 0:
        return []
    return gpu_lines(listing.stdout)
