"""``--backend auto``: which environment a run gets on this machine, and the note that says why.

Tried in order: docker (when a Docker daemon answers and the images build), venv (when the venvs
build), local (this interpreter's torch, as the image "latest": the images' torch versions are then
not compared, and the note says so). With a GPU and Docker, failed builds stop the run instead: on
such a host the local fallback would quietly replace a torch-version comparison on the GPU by one
interpreter's numbers. The note (console, run.json, report) names what ran and why each earlier
choice did not.

``choose`` is the policy alone (tested for every kind of machine with fakes); ``resolve`` wires it to
this machine: nvidia-smi, the Docker daemon, and the real builds.
"""
import os
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Callable, ContextManager, FrozenSet, Mapping, Optional, Tuple

from matrixbench.build.images import BuildOptions
from matrixbench.build.venvs import venvs_root
from matrixbench.errors import MatrixbenchError, RunError
from matrixbench.matrix import Matrix

AUTO = "auto"
LOCAL_IMAGE = "latest"     # the local fallback records this interpreter as the image "latest"
HOW = {
    "docker": "one Docker container per image",
    "venv": "one virtual environment per image, built from its pins",
    "local": f"the local backend (this interpreter's torch, recorded as image '{LOCAL_IMAGE}')",
}
NO_DOCKER = "Docker is not available (no Docker daemon answers)"
NO_VENVS = "venvs were not tried (TRY_VENV=no)"
NO_DOCKER_GPUS = ("Docker runs, but a container asking for GPUs sees none (no NVIDIA container toolkit; "
                  "`matrixbench doctor` says how to install it)")
SKIP_VARIABLE = "MATRIXBENCH_AUTO_SKIP"


@dataclass(frozen=True)
class Machine:
    """What ``--backend auto`` asks of this machine."""

    gpu: bool        # nvidia-smi lists an NVIDIA GPU
    docker: bool     # a Docker daemon answers


@dataclass(frozen=True)
class Choice:
    backend: str                          # docker, venv or local
    note: str                             # what ran and why the earlier ones did not
    images: Optional[Tuple[str, ...]]     # the images to run: None for the matrix's, (latest,) for local


Build = Callable[[], None]   # builds every image of the matrix; raises MatrixbenchError saying why not


def choose(machine: Machine, build_docker: Build, build_venv: Build, try_venv: bool = True,
           docker_gpus: Callable[[], bool] = lambda: True) -> Choice:
    """The policy: docker, else venv, else local; a GPU host with Docker never falls to local. On a GPU
    host, Docker that cannot hand the GPUs to a container (``docker_gpus()``, asked after the build:
    the probe needs a built image) counts as no Docker: venvs time on the GPUs instead of a CPU run."""
    why_not_docker = NO_DOCKER
    if machine.docker:
        failed = _build(build_docker)
        if failed is None and (not machine.gpu or docker_gpus()):
            return Choice("docker", f"--backend auto ran {HOW['docker']}.", None)
        why_not_docker = (f"Docker runs, but the image build failed ({failed})" if failed else NO_DOCKER_GPUS)
    why_not_venv = NO_VENVS
    if try_venv:
        failed = _build(build_venv)
        if failed is None:
            return Choice("venv", f"--backend auto ran {HOW['venv']}. They are in {venvs_root()}. Not Docker: "
                                  f"{why_not_docker}.", None)
        why_not_venv = f"the venv build failed ({failed})"
    if machine.gpu and machine.docker:
        raise RunError(f"--backend auto: not Docker: {why_not_docker}; not venvs: {why_not_venv}. With a GPU and "
                       "Docker, fix a build: the local backend would not compare torch versions on this GPU")
    return Choice("local", f"--backend auto ran {HOW['local']}. Not Docker: {why_not_docker}. Not venvs: "
                           f"{why_not_venv}. So the images' torch versions are not compared.", (LOCAL_IMAGE,))


def _build(build: Build) -> Optional[str]:
    """None when ``build()`` succeeds; else the first line of why not."""
    try:
        build()
    except MatrixbenchError as exc:
        return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return None


def this_machine(skip: FrozenSet[str] = frozenset()) -> Machine:
    """nvidia-smi for a GPU; a ping of the Docker daemon; ``skip`` ("gpu", "docker") forces either off."""
    from matrixbench.build import docker_client
    from matrixbench.gpu import host_gpus

    docker = "docker" not in skip
    if docker:
        try:
            docker_client.connect()
        except MatrixbenchError:
            docker = False
    return Machine(gpu="gpu" not in skip and bool(host_gpus()), docker=docker)


def skipped(environ: Mapping[str, str]) -> FrozenSet[str]:
    """``MATRIXBENCH_AUTO_SKIP`` (``make matrix HAS_GPU=no HAS_DOCKER=no TRY_VENV=no``): gpu, docker, venv."""
    return frozenset(part.strip() for part in environ.get(SKIP_VARIABLE, "").split(",") if part.strip())


def resolve(matrix: Matrix, build_options: Optional[BuildOptions], emit: Callable[[str, str], None],
            environ: Optional[Mapping[str, str]] = None) -> Choice:
    """``choose`` on this machine (or ``machine``), with the real builds of ``matrix``'s images and the user's
    build options (images.BuildOptions, or None); build lines go to ``emit(image_name, line)``."""
    from matrixbench.build import images, venvs

    skip = skipped(os.environ if environ is None else environ)
    given: ContextManager[Mapping[str, object]] = (build_options.spec_options() if build_options is not None
                                                    else nullcontext({}))
    with given as options:
        def build_docker() -> None:
            images.build_images(matrix, list(matrix.images), on_progress=emit, **options)

        def build_venv() -> None:
            venvs.build_venvs(matrix, list(matrix.images), on_progress=emit,
                              **{key: value for key, value in options.items() if key != "base_image"})

        def docker_gpus() -> bool:
            from matrixbench.environments.docker import DockerBackend

            return bool(DockerBackend().gpus_available())

        return choose(this_machine(skip), build_docker, build_venv, try_venv="venv" not in skip,
                      docker_gpus=docker_gpus)
