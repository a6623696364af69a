"""The whole checklist in order (``diagnose``), each image's lines for the environments a run here may use, the
checklist as text (``report``, raising DoctorError on a failure) and what ``doctor --measure`` then measures."""
import os
from typing import List, Optional

from matrixbench.doctor.backend import check_backend, plan_backend, skip_of, skipped_by_variable
from matrixbench.doctor.check import Check, Commands, DoctorError
from matrixbench.doctor.docker import check_container_gpus, check_docker, check_docker_image, sees_gpus
from matrixbench.doctor.docker import connect as docker_connect
from matrixbench.doctor.driver import DRIVER, check_driver, check_driver_cuda, left_out
from matrixbench.doctor.images import HostGpus, check_image
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
    working Docker, ``auto`` runs the venv backend. Under ``auto``, what MATRIXBENCH_AUTO_SKIP (in
    ``commands.environ``) skips is skipped here as ``run --backend auto`` skips it: with the GPUs skipped, the
    builds are checked for the CPU (images.HostGpus.left_out) and the driver's line says so (driver.left_out).
    ``venv_root``: where the venvs live (build.venvs)."""
    commands = commands or Commands()
    skip = skip_of(backend, commands.environ)
    host_gpus, driver = check_driver(commands)
    gpus = HostGpus(tuple(host_gpus))
    if "gpu" in skip:   # the run uses the CPU: its builds are checked for it, and no GPU check follows
        gpus, driver = HostGpus(left_out=skipped_by_variable("GPUs", skip)), left_out(driver, host_gpus, skip)
    checks: List[Check] = [driver]
    driver_cuda = None
    if gpus.found:
        driver_cuda, cuda_check = check_driver_cuda(commands)
        checks.append(cuda_check)
    client, docker_check = check_docker(connect or docker_connect, backend, skip)
    checks.append(docker_check)
    container_check = None
    if client is not None and gpus.found:
        container_check = check_container_gpus(client, list(matrix.images))
    plan = plan_backend(backend, skip, gpu=bool(host_gpus), docker=client is not None,
                        docker_gpus=sees_gpus(container_check))
    if container_check is not None:
        if container_check.status == "fail" and plan.backend == AUTO and plan.first == "venv":
            container_check = Check(container_check.name, "warn", container_check.detail + ": the venv backend "
                                    "runs instead", container_check.fix)
        checks.append(container_check)
    images = image_checks(matrix, gpus, driver_cuda, client, plan, venv_root)
    unbuilt = [name for name, image in matrix.images.items()
               if any(c.name == f"image {name} ({_LABEL.get(plan.first)})" and "not built" in c.detail
                      for c in images)]
    checks += [check_backend(plan, client, container_check, unbuilt), *images]
    if gpus.found:
        checks += [check_other_processes(commands), *check_persistence_and_clocks(list(gpus.found))]
    if plan.first == "venv":
        from matrixbench.build.venvs import venvs_root

        disk_path = existing(venv_root or venvs_root(commands.environ))
    else:
        disk_path = docker_root if os.path.isdir(docker_root) else "."
    checks += [check_disk(commands, len(unbuilt), disk_path, plan.first),
               check_hf(commands.environ, hf_cache or default_hf_cache())]
    return checks


_LABEL = {"docker": "Docker", "venv": "venv"}


def image_checks(matrix, gpus, driver_cuda, client, plan, venv_root=None):
    """Per image a run here runs (``plan.images``), one line for each environment it may use: its Docker image
    (when Docker answers, for docker or auto) and its venv (for venv, or auto unless MATRIXBENCH_AUTO_SKIP skips
    the venvs; under auto behind Docker, the fallback); for the local backend (given, or auto's last resort), the
    entry's build as inferred."""
    checks = []
    for name, image in matrix.images.items():
        if plan.images is not None and name not in plan.images:
            continue
        if client is not None and plan.backend in (AUTO, "docker"):
            checks.append(check_docker_image(name, image, gpus, driver_cuda, client, matrix.modes,
                                             plan.first == "docker"))
        if plan.backend == "venv" or (plan.backend == AUTO and "venv" not in plan.skip):
            checks.append(check_venv(name, image, gpus, driver_cuda, matrix.modes, plan.first == "venv", venv_root))
        if plan.first == "local":
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


GPUS_LEFT_OUT_MEASURE = ("measuring the CPU part, as a run here would use the CPU: the GPUs are left out (the "
                         "driver's line says why); the GPU-bound probe and the selftest's GPU checks are skipped")


def measure_device(checks) -> Optional[str]:
    """What ``doctor --measure`` measures after this checklist (docs/method.md, "Before the bill"): "auto" when
    no check failed; "cpu" when the only failure is that there is no GPU (the CPU loop needs none, and the probe
    and the selftest have a CPU part), or when MATRIXBENCH_AUTO_SKIP left the GPUs out (the driver's line is
    then information: driver.left_out); None when another failure stops it."""
    failed = {check.name for check in checks if check.status == "fail"}
    if failed:
        return "cpu" if failed == {DRIVER} else None
    return "cpu" if any(check.name == DRIVER and check.status == "info" for check in checks) else "auto"
