"""Facts about the machine that need no torch: CPU model, GPU driver, host.

Stdlib only, so the parent process can use it too (for records of cells whose
process died before it could report its own environment).
"""
import glob
import platform
import shutil
import socket
import subprocess


def cpu_model(cpuinfo="/proc/cpuinfo"):
    try:
        with open(cpuinfo) as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def gpu_devices_present(dev="/dev"):
    """Whether NVIDIA GPU device nodes exist (a GPU host, or a container given GPUs)."""
    return bool(glob.glob(f"{dev}/nvidia[0-9]*"))


def gpu_driver_version():
    """The NVIDIA driver version: pynvml if installed, else nvidia-smi, else None."""
    return _driver_from_pynvml() or _driver_from_nvidia_smi()


def _driver_from_pynvml():
    try:
        import pynvml

        pynvml.nvmlInit()
        version = pynvml.nvmlSystemGetDriverVersion()
        return version.decode() if isinstance(version, bytes) else str(version)
    except Exception:
        return None


def _driver_from_nvidia_smi():
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        result = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=30, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    lines = result.stdout.strip().splitlines()
    return lines[0].strip() if lines else None


def fallback_environment(image_name=None, image_id=None):
    """What the parent can say without torch, when no cell process ever reported."""
    return {
        "python": platform.python_version(), "torch": "unknown", "torch_git": None,
        "transformers": "unknown", "cuda": None, "cudnn": None, "gpu_name": None, "gpu_uuid": None,
        "gpu_count": 0, "driver": None, "cpu_model": cpu_model(), "threads": 0,
        "platform": platform.platform(), "hostname": socket.gethostname(),
        "image_name": image_name, "image_id": image_id,
    }
