"""Does this host have NVIDIA GPUs? Asked of nvidia-smi, never of torch (the host has none)."""
import shutil
import subprocess


def host_gpus():
    """Names of the host's NVIDIA GPUs from ``nvidia-smi -L``; [] when there is none or no driver."""
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        listing = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return []
    if listing.returncode != 0:
        return []
    return [line.strip() for line in listing.stdout.splitlines() if line.startswith("GPU ")]
