"""The machine around the GPUs: other processes on them, persistence mode and clocks, free disk for what a
run builds, and the Hugging Face cache and token."""
from pathlib import Path

from matrixbench.doctor.check import Check
from matrixbench.gpu import compute_apps

IMAGE_DISK_GIB = 10       # one image's torch CUDA build and its layers, to build
# One venv's torch CUDA build with its wheels in the wheelhouse: a fresh make matrix (stop 22, the CPU smoke
# matrix's two images from PyPI's CUDA wheels) left 9.6 GB of venvs (4.6 and 5.1) and 4.9 GB of wheels.
VENV_DISK_GIB = 7.5
RESULTS_DISK_GIB = 5      # results, compile and HF caches


def check_other_processes(commands):
    apps = compute_apps(commands.run)
    if not apps:
        return Check("other processes on the GPUs", "ok", "none")
    pids = " ".join(app.split(",")[0] for app in apps)
    return Check("other processes on the GPUs", "fail", f"{len(apps)} running: " + "; ".join(apps),
                 f"stop them (`kill {pids}`) or run on a free GPU with --gpu INDEX")


def check_persistence_and_clocks(gpus):
    off = [g.index for g in gpus if g.persistence.lower() != "enabled"]
    checks = []
    if off:
        checks.append(Check("persistence mode", "warn", f"disabled on GPU(s) {', '.join(off)}: the driver "
                            "unloads between runs and the first cell pays for it", "`sudo nvidia-smi -pm 1`"))
    else:
        checks.append(Check("persistence mode", "ok", "enabled"))
    sm_max, mem_max = gpus[0].sm_clock_max, gpus[0].mem_clock_max
    checks.append(Check("clocks", "info", f"GPU 0 at {gpus[0].sm_clock}/{sm_max} MHz SM, "
                        f"{gpus[0].mem_clock}/{mem_max} MHz memory (current/max); locked clocks make runs "
                        "comparable (PyTorch's benchmarking guidance)",
                        f"`sudo nvidia-smi --lock-gpu-clocks={sm_max},{sm_max}` and "
                        f"`sudo nvidia-smi --lock-memory-clocks={mem_max},{mem_max}`; undo with "
                        "`sudo nvidia-smi --reset-gpu-clocks --reset-memory-clocks`"))
    return checks


def check_disk(commands, unbuilt, path, backend="docker"):
    """Room for ``unbuilt`` images of ``backend`` (docker: IMAGE_DISK_GIB each, under Docker's root; venv:
    VENV_DISK_GIB each, under the cache) and for results and caches, at ``path``."""
    free_gib = commands.disk_free(str(path)) / 2**30
    each = VENV_DISK_GIB if backend == "venv" else IMAGE_DISK_GIB
    need = unbuilt * each + RESULTS_DISK_GIB
    kind = "venv(s)" if backend == "venv" else "image(s)"
    if free_gib < need:
        fix = ("free space (`matrixbench clean --venvs`, or old wheels in the wheelhouse), or use a larger disk"
               if backend == "venv" else "free space (`docker system prune`), or use a larger disk")
        return Check("free disk", "fail", f"{free_gib:.0f} GiB free at {path}, {need:g} GiB needed "
                     f"({unbuilt} {kind} to build at ~{each:g} GiB, results and caches)", fix)
    return Check("free disk", "ok", f"{free_gib:.0f} GiB free at {path} ({need:g} GiB needed)")


def existing(path):
    """``path``, or its nearest existing parent (where a folder not made yet will be)."""
    path = Path(path)
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def check_hf(environ, hf_cache):
    token = "set (passed to containers at run time only)" if environ.get("HF_TOKEN") else "not set"
    return Check("Hugging Face", "info", f"cache at {hf_cache}; HF_TOKEN {token}",
                 None if environ.get("HF_TOKEN") else "only needed for gated models with weights: pretrained")


def default_hf_cache():
    """Where Hugging Face keeps its cache here (matrixbench.paths)."""
    from matrixbench.paths import hf_cache_home

    return Path(hf_cache_home())
