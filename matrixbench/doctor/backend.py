"""Which backend runs the matrix on this machine, and why: the one ``--backend`` names, or the one ``--backend
auto`` picks by its own policy (environments.auto: ``choose``, and ``skipped`` for MATRIXBENCH_AUTO_SKIP, which
``make matrix HAS_GPU=no HAS_DOCKER=no TRY_VENV=no`` sets), asked with what doctor found here. Doctor builds
nothing: every build counts as succeeding, and the fallback is what ``choose`` picks when Docker's fails."""
from dataclasses import dataclass
from typing import Collection, FrozenSet, Mapping, Optional, Tuple

from matrixbench.doctor.check import Check
from matrixbench.environments.auto import AUTO, HOW, SKIP_VARIABLE, Build, Choice, Machine, choose, skipped
from matrixbench.errors import BuildError, RunError


def skip_of(backend: str, environ: Mapping[str, str]) -> FrozenSet[str]:
    """What MATRIXBENCH_AUTO_SKIP in ``environ`` skips (gpu, docker, venv): only --backend auto reads it."""
    return skipped(environ) if backend == AUTO else frozenset()


def skipped_by_variable(what: str, skip: Collection[str]) -> str:
    """``what`` skipped, naming the variable and its value (where to undo it)."""
    return f"{what} skipped ({SKIP_VARIABLE}={','.join(sorted(skip))})"


@dataclass(frozen=True)
class Plan:
    """What a run with ``backend`` does here. ``first``: the backend it tries first (docker, venv or local; None:
    it stops before any, ``stop`` says why); ``fallback``: where its Docker build fails (venv, local; None: it
    stops); ``images``: the images it runs (None: the matrix's); ``skip``: what MATRIXBENCH_AUTO_SKIP skips;
    ``gpus_skipped``: this host has GPUs and the variable skips them."""

    backend: str
    first: Optional[str]
    fallback: Optional[str] = None
    images: Optional[Tuple[str, ...]] = None
    skip: FrozenSet[str] = frozenset()
    stop: Optional[str] = None
    gpus_skipped: bool = False

    def skipped(self, what: str) -> str:
        return skipped_by_variable(what, self.skip)


def plan_backend(backend: str, skip: FrozenSet[str], gpu: bool, docker: bool, docker_gpus: bool) -> Plan:
    """The Plan of a run with ``backend``; for auto, environments.auto.choose on this machine (``gpu``: nvidia-smi
    lists a GPU; ``docker``: the daemon answers; ``docker_gpus``: a container is not known to see none), with
    ``skip`` forcing the GPU, Docker or the venvs off as the run does."""
    if backend != AUTO:
        return Plan(backend, backend)
    machine = Machine(gpu=gpu and "gpu" not in skip, docker=docker and "docker" not in skip)
    gpus_skipped = gpu and "gpu" in skip
    try:
        first = _choose(machine, skip, docker_gpus)
    except RunError as exc:
        return Plan(backend, None, skip=skip, stop=str(exc), gpus_skipped=gpus_skipped)
    fallback = None
    if first.backend == "docker":
        try:
            fallback = _choose(machine, skip, docker_gpus, failing="docker").backend
        except RunError:
            fallback = None
    return Plan(backend, first.backend, fallback, first.images, skip, gpus_skipped=gpus_skipped)


def _choose(machine: Machine, skip: FrozenSet[str], docker_gpus: bool, failing: str = "") -> Choice:
    """auto.choose with builds that succeed, but ``failing``'s."""
    def build(kind: str) -> Build:
        def run() -> None:
            if kind == failing:
                raise BuildError(f"the {kind} build failed")
        return run
    return choose(machine, build("docker"), build("venv"), try_venv="venv" not in skip,
                  docker_gpus=lambda: docker_gpus)


def check_backend(plan: Plan, client: object, container_check: Optional[Check],
                  unbuilt: Collection[str] = ()) -> Check:
    """Which backend runs the matrix on this machine, and why; ``unbuilt``: its images not built yet."""
    todo = f"; a run builds {', '.join(unbuilt)} first" if unbuilt else ""
    if plan.backend != AUTO:
        return Check("backend", "info", f"{plan.backend} (--backend {plan.backend}){todo}")
    no_docker = (plan.skipped("Docker") if "docker" in plan.skip else
                 "Docker does not answer" if client is None else "Docker cannot hand the GPUs to a container")
    if plan.first is None:
        return Check("backend", "fail", f"none: `run --backend auto` would stop here: {plan.stop}",
                     "let Docker hand the GPUs to containers (the fix of GPUs in a container, above), or let the "
                     f"run try the venvs: take venv out of {SKIP_VARIABLE} (`make matrix` without TRY_VENV=no)")
    if plan.first == "venv":
        return Check("backend", "info", f"venv: {no_docker}{todo}")
    if plan.first == "local":
        why = (plan.skipped("Docker and the venvs") if "docker" in plan.skip else
               f"{no_docker}; {plan.skipped('the venvs')}")
        return Check("backend", "info", f"local: {HOW['local']}, so the images' torch versions are not compared: "
                     f"{why}")
    gpus = " and hands the GPUs to containers" if container_check is not None and container_check.status == "ok" else ""
    if plan.gpus_skipped:
        gpus = f"; {plan.skipped('GPUs')}, so no container is asked for them"
    return Check("backend", "info", f"docker: the daemon answers{gpus}{todo}{_fallback(plan) if unbuilt else ''}")


def _fallback(plan: Plan) -> str:
    """Where a Docker build fails."""
    if plan.fallback == "venv":
        return "; where a Docker build fails, the venvs"
    if plan.fallback == "local":
        return f"; where a Docker build fails, the local backend: {plan.skipped('venvs')}"
    return (f"; where a Docker build fails, the run stops (with a GPU and Docker, never the local backend): "
            f"{plan.skipped('venvs')}")
