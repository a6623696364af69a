"""Each image's CUDA build against this host's driver and GPUs, before anything is built or run.

Once an image is built, its build says what it is (``build_facts``: torch's CUDA version and arch
list, recorded in the image's label or the venv's marker), and that is what is checked: doctor and the
run's pre-flight (``refuse_builds``). Before that (and for a build made before builds recorded it)
it is inferred, and the messages say so: the ``cuXYZ`` of its ``index_url``, or (no index_url) the
CUDA build PyPI serves for that torch version. A build runs when the driver supports its CUDA major
(``runner.archcheck.driver_runs``: 12.x on any driver from 525 on, 13.x from 580 on) and carries
kernels for every GPU (``runner.archcheck.WHEEL_ARCHES``). ``doctor``, ``validate`` and ``build``
ask ``image_problems``; ``refuse_on_this_host`` raises with the fix. The driver's newest CUDA
comes from ``nvidia-smi``'s header (as NVML's ``nvmlSystemGetCudaDriverVersion`` gives it).
"""
import dataclasses
import re
from dataclasses import dataclass
from typing import Any, Callable, List, Mapping, Optional, Tuple

from matrixbench.build.facts import BuildFacts
from matrixbench.build.versions import pinned_version
from matrixbench.errors import MatrixbenchError
from matrixbench.gpu import host_gpus, run_command
from runner.archcheck import WHEEL_ARCHES, driver_runs, index_url, runs_on, suggested_cuda, triton_problem

# The CUDA build of PyPI's Linux torch wheels by torch minor version (the newest CUDA of each
# release; 2.10 on: 13.0, which needs driver 580 and has no Volta kernels).
PYPI_CUDA = {(2, 0): "11.7", (2, 1): "12.1", (2, 2): "12.1", (2, 3): "12.1", (2, 4): "12.1",
             (2, 5): "12.4", (2, 6): "12.4", (2, 7): "12.6", (2, 8): "12.8", (2, 9): "12.8"}
PYPI_NEWEST_CUDA = "13.0"
CPU_BUILD = re.compile(r"/(cpu|rocm[0-9.]*|xpu)/?$")


class CudaBuildError(MatrixbenchError):
    """An image's CUDA build cannot run on this host's driver or GPUs."""

    exit_code = 2


@dataclass(frozen=True)
class Problem:
    image: str
    what: str
    fix: str
    kind: str = "cuda"     # "cuda" (driver or kernels) or "cpu" (a CPU build on a GPU host)


@dataclass(frozen=True)
class KnownBuild:
    """An image's torch build as far as it is known: read from the build (``build_facts``, recorded
    when it was built) or, before it is built, inferred from the matrix entry."""

    torch: str                   # what to call it: the built torch's version, or the entry's requirement
    cuda: Optional[str]          # "12.8"; None for a CPU (or ROCm) build
    arches: Tuple[str, ...]      # its kernels (the build's arch list, or WHEEL_ARCHES of its CUDA)
    source: str                  # how it is known, said in every message

    @property
    def recorded(self) -> bool:
        return self.source == READ


READ = "read from the build"


def image_cuda(image) -> Optional[str]:
    """The CUDA version of an image's torch build ("12.8"); None for a CPU (or ROCm) build."""
    url = (image.index_url or "").rstrip("/")
    match = re.search(r"/cu(\d+)(\d)(?:/|$)", url)   # .../whl/cu128, or a mirror's .../cu121/simple
    if match:
        return f"{match.group(1)}.{match.group(2)}"
    if CPU_BUILD.search(url) or (image.torch_version or "").endswith("+cpu"):
        return None
    return pypi_cuda(image.torch_version)



def known_build(image, facts: Optional[BuildFacts] = None) -> KnownBuild:
    """``facts`` (what the build's torch said when it was built) when there are some, else the inference."""
    if facts is not None:
        return KnownBuild(f"torch {facts.torch}", None if facts.is_cpu else facts.cuda, facts.arch_list, READ)
    cuda = image_cuda(image)
    guess = "PyPI's wheel: no index_url" if not image.index_url else "inferred from its index_url"
    return KnownBuild(image.torch, cuda, tuple(WHEEL_ARCHES.get(cuda or "", ())),
                      f"{guess}; not read from a build")


def pypi_cuda(torch_version: Optional[str]) -> str:
    """The CUDA build of PyPI's Linux wheel of ``torch_version`` ("2.13.0" -> "13.0")."""
    numbers = re.match(r"(\d+)\.(\d+)", torch_version or "")
    if numbers is None:
        return PYPI_NEWEST_CUDA
    return PYPI_CUDA.get((int(numbers.group(1)), int(numbers.group(2))), PYPI_NEWEST_CUDA)


def driver_cuda_version(nvidia_smi_text: str) -> Optional[str]:
    """The newest CUDA the driver supports, from plain ``nvidia-smi``'s header ("CUDA Version: 12.4")."""
    match = re.search(r"CUDA Version:\s*([0-9]+\.[0-9]+)", nvidia_smi_text)
    return match.group(1) if match else None


def host_driver_cuda(run=None) -> Optional[str]:
    code, text = (run or run_command)(["nvidia-smi"])
    return driver_cuda_version(text) if code == 0 else None


def image_problems(name, image, gpus, driver_cuda, facts=None, cpu=False) -> List[Problem]:
    """Why image ``name``'s build cannot run on these GPUs under this driver, each with its fix; the build
    as ``facts`` says (build_facts, recorded when built), else as inferred. ``cpu``: a CPU build is one."""
    build = known_build(image, facts)
    if not gpus:
        return []
    problems = _problems(name, build, gpus, driver_cuda, cpu)
    other = not_as_asked(image, build)
    return [dataclasses.replace(p, fix=f"{p.fix}; {other}") for p in problems] if other else problems


def _problems(name, build, gpus, driver_cuda, cpu):
    if build.cuda is None:
        return [_cpu_problem(name, build, gpus[0])] if cpu else []
    problems = []
    if driver_cuda and not driver_runs(build.cuda, driver_cuda):
        problems.append(Problem(name, f"{build.torch} is a CUDA {build.cuda} build ({build.source}), which needs "
                                f"a driver for CUDA {build.cuda.split('.')[0]}.x (this driver, {gpus[0].driver}, "
                                f"supports CUDA up to {driver_cuda})",
                                _fix(name, gpus[0].capability, driver_cuda, "for this driver")))
    for gpu in gpus:
        if build.arches and gpu.capability and not any(runs_on(arch, gpu.capability) for arch in build.arches):
            major, minor = gpu.capability
            problems.append(Problem(name, f"{build.torch} (CUDA {build.cuda}, {build.source}) has no kernels for "
                                    f"{gpu.name} (compute capability {major}.{minor}; it carries "
                                    f"{' '.join(build.arches)})",
                                    _fix(name, gpu.capability, driver_cuda, f"for the {gpu.name}")))
            break
    return problems


def not_as_asked(image, build):
    """When the build holds another CUDA build than its entry asks for: why, and how to pin it."""
    asked = image_cuda(image)
    if not build.recorded or asked == build.cuda:
        return ""
    version = pinned_version(image.torch or "") or build.torch.split()[-1].split("+")[0]
    tag = f"cu{asked.replace('.', '')}" if asked else "cpu"
    return (f"note: the entry asks for {f'CUDA {asked}' if asked else 'a CPU build'} but the build holds "
            f"{f'CUDA {build.cuda}' if build.cuda else 'a CPU build'} (the wheelhouse, the base image or an index "
            f"served another build of the same version): to get the asked one, pin it, e.g. torch=={version}+{tag}")


def _cpu_problem(name, build, gpu):
    return Problem(name, f"{build.torch} is a CPU build ({build.source}; torch.version.cuda is None): it "
                   f"cannot use the {gpu.name}",
                   f"{_fix(name, gpu.capability, None, 'for a CUDA build')}; or time it on the CPU with --device cpu",
                   kind="cpu")


def _fix(name, capability, driver_cuda, why):
    cuda = suggested_cuda(capability, driver_cuda) if capability else suggested_cuda((9, 0), driver_cuda)
    if cuda is None:
        return f"update the NVIDIA driver, or give images.{name}.index_url a CUDA build that runs here"
    return (f"use index_url {index_url(cuda)} {why} (images.{name}.index_url in the matrix, with a torch "
            f"version served there), then `matrixbench build --images {name}`")


def host_problems(matrix, names, run=None, backend=None) -> List[Problem]:
    """The problems of the named images on this host; [] on a host without NVIDIA GPUs. With ``backend``
    (docker, venv, auto), an image already built for it is checked as its build recorded itself."""
    gpus = host_gpus(run)
    if not gpus:
        return []
    driver_cuda = host_driver_cuda(run)
    client = _docker(backend)
    return [problem for name in names for problem in image_problems(
        name, matrix.images[name], gpus, driver_cuda, recorded_facts(matrix.images[name], backend, client))]


def refuse_on_this_host(matrix, names, run=None, backend=None):
    """Raise CudaBuildError naming every image that cannot run on this host's driver/GPUs and its fix."""
    _raise(host_problems(matrix, names, run, backend), "these images' CUDA builds cannot run on this machine")


def recorded_facts(image, backend, client) -> Optional[BuildFacts]:
    """What the image's build recorded of itself (build_facts), or None when it is not built (or was built
    before builds recorded it): the Docker image built from this entry (``client``: a DockerClient, for
    ``--backend`` docker or auto), else, for venv or auto, its venv."""
    from matrixbench.build import docker_client, images, venvs
    from matrixbench.build import facts as build_facts

    if client is not None and backend in ("auto", "docker"):
        info = client.inspect_image(images.image_tag(image.name))
        labels = getattr(info, "labels", None) or {}
        if labels.get(docker_client.LABEL_CONTENT_HASH) == image.content_hash():
            return build_facts.from_labels(labels)
    if backend in ("auto", "venv"):
        venv = venvs.read_marker(venvs.plan_venv(image))
        return venv.facts if venv is not None else None
    return None


def _docker(backend):
    """A Docker client to read built images' labels, when ``backend`` uses Docker and a daemon answers."""
    if backend not in ("auto", "docker"):
        return None
    from matrixbench.build import docker_client

    try:
        return docker_client.connect()
    except MatrixbenchError:
        return None


def refuse_builds(images: Mapping[str, Any], facts_of: Callable, note: Callable[[str], None], run=None):
    """The run's pre-flight, once the images are built and before any cell runs, when the run uses the
    GPUs: each build as it recorded itself (``facts_of(image)``: build_facts or None) against this host's
    driver and GPUs, a CPU build included. A build that recorded nothing is checked by inference, and
    ``note`` says so. Raise CudaBuildError naming every image that cannot run, its build, and the fix."""
    gpus = host_gpus(run)
    if not gpus:
        return
    driver_cuda = host_driver_cuda(run)
    problems = []
    for name, image in images.items():
        facts = facts_of(image)
        if facts is None:
            note(f"image {name}: its build did not record its CUDA version (built by an older matrixbench): "
                 f"checked by inference from the matrix entry; `matrixbench build --images {name}` records it")
        problems += image_problems(name, image, gpus, driver_cuda, facts, cpu=True)
    _raise(problems, "these images' builds cannot run on this machine's GPUs")


def _raise(problems, what):
    if problems:
        raise CudaBuildError(f"{what}:\n" + "\n".join(
            f"  image {p.image}: {p.what}\n    fix: {p.fix}" for p in problems))


def mode_problems(name, image, gpus, modes) -> List[Problem]:
    """Cells of image ``name`` the runner will refuse on these GPUs: max-autotune with torch 2.0's
    Triton 2.0 on Hopper (runner.archcheck.triton_problem), said before the run starts."""
    if "max-autotune" not in modes or not (image.torch_version or "").startswith("2.0."):
        return []
    for gpu in gpus:
        if gpu.capability and triton_problem("2.0.0", gpu.capability, gpu.name, "max-autotune"):
            return [Problem(name, f"its max-autotune cells will be refused on {gpu.name}: torch "
                            f"{image.torch_version}'s Triton 2.0 cannot compile Inductor's matmul templates for "
                            f"compute capability {gpu.capability[0]}.{gpu.capability[1]}",
                            f"drop max-autotune for images.{name} (--modes), or time it on a GPU before Hopper")]
    return []
