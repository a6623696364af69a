"""``matrixbench doctor``: what to fix on a rented GPU machine before the bill starts.

A checklist, each item ``ok``, ``warn`` (measurements would be weaker) or ``fail`` (cells would
fail or measure the wrong thing), every one not ok with its fix. Facts come from
``nvidia-smi`` (queried by ``matrixbench.gpu``, the one place that asks for the host's GPUs),
the Docker daemon and the matrix; the commands are run through one ``Commands`` seam so tests
replay recorded outputs.
"""
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, List, Optional

from matrixbench.build.cuda_builds import (
    driver_cuda_version,
    image_cuda,
    image_problems,
    known_build,
    mode_problems,
    not_as_asked,
    recorded_facts,
)
from matrixbench.errors import MatrixbenchError
from matrixbench.gpu import compute_apps, query_gpus, run_command

AUTO = "auto"             # --backend auto: docker when it answers, else venvs
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


def check_docker(connect, backend=AUTO):
    """Docker answers; when it does not, a failure only for ``--backend docker``: otherwise the venv
    backend runs the images (and still compares their torch versions)."""
    if backend in ("venv", "local"):
        return None, Check("Docker", "info", f"not checked (--backend {backend})")
    try:
        return connect(), Check("Docker", "ok", "the daemon answers")
    except MatrixbenchError as exc:
        reason, fix = str(exc).split(";")[0], str(exc).split(";", 1)[-1].strip()
        if backend == "docker":
            return None, Check("Docker", "fail", reason, fix)
        return None, Check("Docker", "warn", f"{reason}: the venv backend runs instead (one virtual "
                           "environment per image, the same torch comparison)", f"for containers: {fix}")


def check_backend(client, container_check, backend=AUTO):
    """Which backend runs the matrix on this machine, and why."""
    if backend != AUTO:
        return Check("backend", "info", f"{backend} (--backend {backend})")
    if client is None:
        return Check("backend", "info", "venv: Docker does not answer")
    if container_check is not None and container_check.status != "ok" and "sees none" in container_check.detail:
        return Check("backend", "info", "venv: Docker cannot hand the GPUs to a container")
    return Check("backend", "info", "docker: the daemon answers" + (
        " and hands the GPUs to containers" if container_check is not None and container_check.status == "ok" else ""))


def check_container_gpus(client, images):
    """GPUs as a container sees them, asked of the first built matrix image."""
    from matrixbench.build.images import image_tag

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


def check_image(name, image, gpus, driver_cuda, client, modes=(), facts=None):
    """One matrix image: its CUDA build runs under this driver and has kernels for these GPUs
    (matrixbench.build.cuda_builds), the build as it recorded itself (``facts``) when it is built, else as
    inferred; and, when Docker answers, whether it is built. A CPU build fails on a GPU host when the
    entry asked for a CUDA one, and warns when it asked for the CPU (the smoke matrix)."""
    from matrixbench.build.images import image_tag

    wanted_cpu = image_cuda(image) is None
    problems = [("warn" if p.kind == "cpu" and wanted_cpu else "fail", p.what, p.fix)
                for p in image_problems(name, image, gpus, driver_cuda, facts, cpu=True)]
    problems += [("warn", p.what, p.fix) for p in mode_problems(name, image, gpus, modes)]
    built = client is not None and client.inspect_image(image_tag(name))
    if client is not None and not built:
        problems.append(("warn", f"not built ({image_tag(name)})", f"`matrixbench build --images {name}`"))
    known = known_build(image, facts)
    other = not_as_asked(image, known)
    if other and not any(other in p[2] for p in problems):   # (a GPU problem's fix already says it)
        problems.append(("warn", f"{known.torch} is another build than the entry asks for",
                         other.removeprefix("note: ")))
    build = f"CUDA {known.cuda}" if known.cuda else "a CPU build"
    if not problems:
        runs = "runs on these GPUs" if gpus else "no GPU here to check it against"
        where = (f"built, {runs}" if built else f"{runs} (not checked whether it is built: Docker "
                 "was not asked; the venv backend builds its venv)" if client is None else runs)
        return Check(f"image {name}", "ok", f"{known.torch}, {build} ({known.source}): {where}")
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


def diagnose(matrix, commands=None, connect=None, hf_cache=None, docker_root="/var/lib/docker", backend=AUTO):
    """The whole checklist, in order. Docker's checks fail only for ``backend`` "docker": without a
    working Docker, ``auto`` runs the venv backend."""
    commands = commands or Commands()
    gpus, driver = check_driver(commands)
    checks: List[Check] = [driver]
    driver_cuda = None
    if gpus:
        driver_cuda, cuda_check = check_driver_cuda(commands)
        checks.append(cuda_check)
    client, docker_check = check_docker(connect or _connect, backend)
    checks.append(docker_check)
    container_check = None
    if client is not None and gpus:
        container_check = check_container_gpus(client, list(matrix.images))
        if container_check.status == "fail" and backend == AUTO:
            container_check = Check(container_check.name, "warn", container_check.detail + ": the venv backend "
                                    "runs instead", container_check.fix)
        checks.append(container_check)
    checks.append(check_backend(client, container_check, backend))
    checks += [check_image(name, image, gpus, driver_cuda, client, matrix.modes,
                           recorded_facts(image, backend, client))
               for name, image in matrix.images.items()]
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
    from matrixbench.build import docker_client

    return docker_client.connect()


def _hf_cache():
    from matrixbench.paths import hf_cache_home

    return Path(hf_cache_home())
