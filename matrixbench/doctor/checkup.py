"""The whole checklist in order (``diagnose``), each image's lines for the environments a run here may use, the
checklist as text (``report``, raising DoctorError on a failure) and what ``doctor --measure`` then measures."""
import os
from typing import List, Optional

from matrixbench.doctor.backend import check_backend, first_backend
from matrixbench.doctor.check import Check, Commands, DoctorError
from matrixbench.doctor.docker import check_container_gpus, check_docker, check_docker_image
from matrixbench.doctor.docker import connect as docker_connect
from matrixbench.doctor.driver import DRIVER, check_driver, check_driver_cuda
from matrixbench.doctor.images import check_image
from matrixbench.doctor.machine import (
    check_disk,
    check_hf,
    check_other_processes,
    check_persistence_and_clocks,
    default_hf_cache,
    existing,
)
from matrixbench.doctor.venv import check_venv
from matrixbench.environments.auto import AUTO


def diagnose(matrix, commands=None, connect=None, hf_cache=None, docker_root="/var/lib/docker", backend=AUTO,
             venv_root=None):
    """The whole checklist, in order. Docker's checks fail only for ``backend`` "docker": without a
    working Docker, ``auto`` runs the venv backend. ``venv_root``: where the venvs live (build.venvs)."""
    commands = commands or Commands()
    gpus, driver = check_driver(commands)
    checks: List[Check] = [driver]
    driver_cuda = None
    if gpus:
        driver_cuda, cuda_check = check_driver_cuda(commands)
        checks.append(cuda_check)
    client, docker_check = check_docker(connect or docker_connect, backend)
    checks.append(docker_check)
    container_check = None
    if client is not None and gpus:
        container_check = check_container_gpus(client, list(matrix.images))
        if container_check.status == "fail" and backend == AUTO:
            container_check = Check(container_check.name, "warn", container_check.detail + ": the venv backend "
                                    "runs instead", container_check.fix)
        checks.append(container_check)
    first = first_backend(client, container_check, backend)
    images = image_checks(matrix, gpus, driver_cuda, client, backend, first, venv_root)
    unbuilt = [name for name, image in matrix.images.items()
               if any(c.name == f"image {name} ({_LABEL.get(first)})" and "not built" in c.detail for c in images)]
    checks += [check_backend(client, container_check, backend, unbuilt), *images]
    if gpus:
        checks += [check_other_processes(commands), *check_persistence_and_clocks(gpus)]
    if first == "venv":
        from matrixbench.build.venvs import venvs_root

        disk_path = existing(venv_root or venvs_root(commands.environ))
    else:
        disk_path = docker_root if os.path.isdir(docker_root) else "."
    checks += [check_disk(commands, len(unbuilt), disk_path, first),
               check_hf(commands.environ, hf_cache or default_hf_cache())]
    return checks


_LABEL = {"docker": "Docker", "venv": "venv"}


def image_checks(matrix, gpus, driver_cuda, client, backend, first, venv_root=None):
    """Per image, one line for each environment a run here may use: its Docker image (when Docker answers,
    for docker or auto) and its venv (for venv or auto; under auto behind Docker, the fallback); for the
    local backend, the entry's build as inferred."""
    checks = []
    for name, image in matrix.images.items():
        if client is not None and backend in (AUTO, "docker"):
            checks.append(check_docker_image(name, image, gpus, driver_cuda, client, matrix.modes, first == "docker"))
        if backend in (AUTO, "venv"):
            checks.append(check_venv(name, image, gpus, driver_cuda, matrix.modes, first == "venv", venv_root))
        if backend == "local":
            checks.append(check_image(name, image, gpus, driver_cuda, None, matrix.modes))
    return checks


def checklist(checks):
    """The checklist as text, one or two lines a check."""
    return "\n".join(line for check in checks for line in check.lines())


def report(checks):
    """The checklist as text; raises DoctorError (with the text) when a check failed."""
    text = checklist(checks)
    failed = [check.name for check in checks if check.status == "fail"]
    if failed:
        raise DoctorError(f"{len(failed)} check(s) failed ({', '.join(failed)}):\n{text}")
    return text


NO_GPU_MEASURE = ("measuring without a GPU (nvidia-smi finds none): the CPU loop, the noise probe and the selftest "
                  "on the CPU; the GPU-bound probe (CUDA-graph replay) and the selftest's GPU checks are skipped for "
                  "want of a GPU")


def measure_device(checks) -> Optional[str]:
    """What ``doctor --measure`` measures after this checklist (docs/method.md, "Before the bill"): "auto" when
    no check failed; "cpu" when the only failure is that there is no GPU (the CPU loop needs none, and the probe
    and the selftest have a CPU part); None when another failure stops it."""
    failed = {check.name for check in checks if check.status == "fail"}
    if not failed:
        return "auto"
    return "cpu" if failed == {DRIVER} else None
