"""``matrixbench doctor``: what to fix on a rented GPU machine before the bill starts.

A checklist, each item ``ok``, ``warn`` (measurements would be weaker) or ``fail`` (cells would
fail or measure the wrong thing), every one not ok with its fix. Facts come from
``nvidia-smi`` (queried by ``matrixbench.gpu``, the one place that asks for the host's GPUs),
the Docker daemon and the matrix; the commands are run through one ``Commands`` seam so tests
replay recorded outputs.
"""
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, List, Optional

from matrixbench.errors import MatrixbenchError
from matrixbench.gpu import compute_apps, query_gpus, run_command
from runner.archcheck import runs_on

# Kernels in the torch wheels per CUDA version (TORCH_CUDA_ARCH_LIST of the wheel builds:
# pytorch/builder manywheel/build_cuda.sh for 11.8, pytorch .ci/manywheel/build_cuda.sh after).
WHEEL_ARCHES = {
    "11.8": ["sm_37", "sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"],
    "12.6": ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"],
    "12.8": ["sm_70", "sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"],
    "12.9": ["sm_70", "sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120", "compute_120"],
}
PYPI_CUDA = "12.8"        # assumed CUDA of PyPI's Linux torch wheels (no index_url): see WHEEL_ARCHES
IMAGE_DISK_GIB = 10       # one image's torch CUDA build and its layers, to build
RESULTS_DISK_GIB = 5      # results, compile and HF caches


class DoctorError(MatrixbenchError):
    """At least one check failed; the message is the checklist."""

    exit_code = 7


@dataclass(frozen=True)
class Check:
    name: str
    status: str            # "ok", "warn", "fail", "info"
    detail: str
    fix: Optional[str] = None

    def lines(self):
        mark = {"ok": " ok ", "warn": "WARN", "fail": "FAIL", "info": "info"}[self.status]
        return [f"[{mark}] {self.name}: {self.detail}"] + ([f"       fix: {self.fix}"] if self.fix else [])


@dataclass
class Commands:
    """How doctor runs a command: ``run(argv) -> (exit code, stdout)`` (None when missing)."""

    run: Optional[Callable] = None
    environ: dict = field(default_factory=lambda: dict(os.environ))
    disk_free: Optional[Callable] = None

    def __post_init__(self):
        self.run = self.run or run_command
        self.disk_free = self.disk_free or (lambda path: shutil.disk_usage(path).free)


def driver_cuda_version(nvidia_smi_text):
    """The newest CUDA the driver supports, from plain ``nvidia-smi``'s header ("CUDA Version: 12.2")."""
    match = re.search(r"CUDA Version:\s*([0-9]+\.[0-9]+)", nvidia_smi_text)
    return match.group(1) if match else None


def image_cuda(image):
    """The CUDA version of an image's torch build: cuXYZ in its index_url, else PyPI's."""
    match = re.search(r"/cu(\d+)(\d)\b", image.index_url or "")
    return f"{match.group(1)}.{match.group(2)}" if match else PYPI_CUDA


def check_driver(commands):
    gpus = query_gpus(commands.run)
    if not gpus:
        return [], Check("driver and GPUs", "fail", "nvidia-smi finds no NVIDIA GPU" if gpus is not None
                         else "nvidia-smi is not installed",
                         "install the NVIDIA driver (e.g. `sudo apt-get install nvidia-driver-550`), reboot, "
                         "and check that `nvidia-smi` lists the GPUs")
    listing = "; ".join(f"{g.index}: {g.name} ({g.uuid})" for g in gpus)
    return gpus, Check("driver and GPUs", "ok", f"driver {gpus[0].driver}, {len(gpus)} GPU(s): {listing}")


def check_driver_cuda(commands):
    code, text = commands.run(["nvidia-smi"])
    version = driver_cuda_version(text) if code == 0 else None
    if version is None:
        return None, Check("driver CUDA version", "warn", "nvidia-smi does not say which CUDA it supports",
                           "update the NVIDIA driver")
    return version, Check("driver CUDA version", "ok", f"the driver supports CUDA up to {version}")


def check_docker(connect):
    try:
        return connect(), Check("Docker", "ok", "the daemon answers")
    except MatrixbenchError as exc:
        return None, Check("Docker", "fail", str(exc).split(";")[0], str(exc).split(";", 1)[-1].strip())


def check_container_gpus(client, images):
    """GPUs as a container sees them, asked of the first built matrix image."""
    from matrixbench.images import image_tag

    built = [name for name in images if client.inspect_image(image_tag(name))]
    if not built:
        return Check("GPUs in a container", "warn", "no matrix image is built yet, so this cannot be tried",
                     "`matrixbench build`, then run doctor again")
    lines = client.gpu_probe(image_tag(built[0]))
    if not lines:
        return Check("GPUs in a container", "fail", f"a container of {image_tag(built[0])} asking for GPUs sees none",
                     "install the NVIDIA container toolkit: `sudo apt-get install -y nvidia-container-toolkit && "
                     "sudo nvidia-ctk runtime configure --runtime=docker && sudo systemctl restart docker`")
    return Check("GPUs in a container", "ok", f"{len(lines)} GPU(s): " + "; ".join(lines))


def check_image(name, image, gpus, driver_cuda, client):
    """One matrix image: built, its torch build has kernels for these GPUs, the driver runs its CUDA."""
    from matrixbench.images import image_tag

    problems = []
    if client is not None and not client.inspect_image(image_tag(name)):
        problems.append(("warn", f"not built ({image_tag(name)})", f"`matrixbench build --images {name}`"))
    cuda = image_cuda(image)
    arches = WHEEL_ARCHES.get(cuda)
    for gpu in gpus:
        if arches and gpu.capability and not any(runs_on(arch, gpu.capability) for arch in arches):
            problems.append(("fail", f"{image.torch} (CUDA {cuda}) has no kernels for {gpu.name} "
                             f"(compute capability {gpu.capability[0]}.{gpu.capability[1]})",
                             f"set images.{name}.index_url to a newer CUDA build "
                             "(https://download.pytorch.org/whl/cu128) with a torch that has one, and rebuild"))
            break
    if driver_cuda and int(driver_cuda.split(".")[0]) < int(cuda.split(".")[0]):
        problems.append(("fail", f"its CUDA {cuda} needs a newer driver (the driver supports CUDA {driver_cuda})",
                         f"update the NVIDIA driver, or give images.{name}.index_url an older CUDA build"))
    if not problems:
        return Check(f"image {name}", "ok", f"{image.torch}, CUDA {cuda}: built, runs on these GPUs")
    worst = "fail" if any(p[0] == "fail" for p in problems) else "warn"
    return Check(f"image {name}", worst, "; ".join(p[1] for p in problems), "; ".join(p[2] for p in problems))


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


def check_disk(commands, unbuilt, path):
    free_gib = commands.disk_free(str(path)) / 2**30
    need = unbuilt * IMAGE_DISK_GIB + RESULTS_DISK_GIB
    if free_gib < need:
        return Check("free disk", "fail", f"{free_gib:.0f} GiB free at {path}, {need} GiB needed "
                     f"({unbuilt} image(s) to build at ~{IMAGE_DISK_GIB} GiB, results and caches)",
                     "free space (`docker system prune`), or use a larger disk")
    return Check("free disk", "ok", f"{free_gib:.0f} GiB free at {path} ({need} GiB needed)")


def check_hf(environ, hf_cache):
    token = "set (passed to containers at run time only)" if environ.get("HF_TOKEN") else "not set"
    return Check("Hugging Face", "info", f"cache at {hf_cache}; HF_TOKEN {token}",
                 None if environ.get("HF_TOKEN") else "only needed for gated models with weights: pretrained")


def diagnose(matrix, commands=None, connect=None, hf_cache=None, docker_root="/var/lib/docker"):
    """The whole checklist, in order."""
    commands = commands or Commands()
    gpus, driver = check_driver(commands)
    checks: List[Check] = [driver]
    driver_cuda = None
    if gpus:
        driver_cuda, cuda_check = check_driver_cuda(commands)
        checks.append(cuda_check)
    client, docker_check = check_docker(connect or _connect)
    checks.append(docker_check)
    if client is not None and gpus:
        checks.append(check_container_gpus(client, list(matrix.images)))
    checks += [check_image(name, image, gpus, driver_cuda, client) for name, image in matrix.images.items()]
    if gpus:
        checks += [check_other_processes(commands), *check_persistence_and_clocks(gpus)]
    unbuilt = sum(1 for check in checks if check.name.startswith("image ") and "not built" in check.detail)
    disk_path = docker_root if os.path.isdir(docker_root) else "."
    checks += [check_disk(commands, unbuilt, disk_path), check_hf(commands.environ, hf_cache or _hf_cache())]
    return checks


def report(checks):
    """The checklist as text; raises DoctorError (with the text) when a check failed."""
    text = "\n".join(line for check in checks for line in check.lines())
    failed = [check.name for check in checks if check.status == "fail"]
    if failed:
        raise DoctorError(f"{len(failed)} check(s) failed ({', '.join(failed)}):\n{text}")
    return text


def _connect():
    from matrixbench import docker_client

    return docker_client.connect()


def _hf_cache():
    from matrixbench.paths import hf_cache_home

    return Path(hf_cache_home())
