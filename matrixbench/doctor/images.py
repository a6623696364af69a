"""An image entry's torch build (recorded, else inferred from the entry) against this driver and these GPUs
(matrixbench.build.cuda_builds), as problems ``(status, what, fix)`` and as one check line; the line of the
local backend, which runs neither a Docker image nor a venv."""
from dataclasses import dataclass
from typing import Tuple

from matrixbench.build.cuda_builds import image_cuda, image_problems, known_build, mode_problems, not_as_asked
from matrixbench.doctor.check import Check
from matrixbench.gpu import Gpu


@dataclass(frozen=True)
class HostGpus:
    """The GPUs the builds are checked against: this host's (``found``, none where nvidia-smi lists none), or none
    because the user left them out (``left_out``: why, MATRIXBENCH_AUTO_SKIP=gpu), when a run here uses the CPU."""

    found: Tuple[Gpu, ...] = ()
    left_out: str = ""


def check_image(name, image, gpus, driver_cuda, client, modes=(), facts=None):
    """One matrix image for the local backend (neither its Docker image nor its venv runs): its CUDA build
    (``facts``, else inferred from the entry) against this driver and these GPUs (matrixbench.build.cuda_builds).
    A CPU build fails on a GPU host when the entry asked for a CUDA one, and warns when it asked for the CPU."""
    known = known_build(image, facts)
    problems = build_problems(name, image, gpus, driver_cuda, modes, facts)
    add_not_as_asked(problems, image, known, f"{known.torch} is another build than the entry asks for")
    if not problems:
        return Check(f"image {name}", "ok", summary(known, gpus))
    return worst(f"image {name}", problems)


def add_not_as_asked(problems, image, known, what):
    """A warning ``what`` where the build is not the one the entry asks for (not_as_asked), unless a GPU
    problem's fix already says so."""
    other = not_as_asked(image, known)
    if other and not any(other in p[2] for p in problems):
        problems.append(("warn", what, other.removeprefix("note: ")))


# A build's record of the indexes it used (indexes.Indexes.record), by backend: where it is kept, and the rebuild
RECORDS = {"venv": ("its marker", "matrixbench build --backend venv --no-cache"),
           "docker": ("its label", "matrixbench build --no-cache")}


def add_why_not_as_asked(problems, name, image, known, used, gpus, backend):
    """The warning of ``not_as_asked_why`` where the build is not the one the entry asks for (not_as_asked),
    unless a GPU problem's fix already says so."""
    other = not_as_asked(image, known)
    if other and not any(other in p[2] for p in problems):
        problems.append(not_as_asked_why(name, image, known, used, gpus, backend))


def not_as_asked_why(name, image, known, used, gpus, backend):
    """(warn, what, fix): the build (a venv, a Docker image: ``backend``) holds another torch build than its entry
    asks for; why, from what it recorded of its indexes (``used``: a venv's marker, an image's label)."""
    asked = image_cuda(image)
    index = (image.index_url or "PyPI").rstrip("/")
    held = f"CUDA {known.cuda}" if known.cuda else "CPU"
    what = (f"it holds {known.torch}, a {held} build, but the entry asks for the "
            f"{f'CUDA {asked}' if asked else 'CPU'} build of {index}: {_why_other(name, used, backend)}")
    if not gpus.found and not asked:
        what += (f"; without a GPU it runs on the CPU all the same, and each record names the torch that ran "
                 f"({known.torch.split()[-1]}), so a CPU smoke run is sound")
    version = known.torch.split()[-1].split("+")[0]
    tag = f"cu{asked.replace('.', '')}" if asked else "cpu"
    return ("warn", what, f"once {index} answers: `{RECORDS[backend][1]} --images {name}` "
            f"(or pin images.{name}.torch to torch=={version}+{tag})")


def _why_other(name, used, backend):
    """Why a build got another torch build, as far as its record (``torch_index_used``, ``indexes_left_out``) says."""
    if "torch_index_used" not in used:
        return (f"{RECORDS[backend][0]} does not say why (built before builds recorded the indexes they used): "
                "that index did not answer, or the shared wheelhouse held PyPI's wheel of the same version")
    left = [out for out in used.get("indexes_left_out") or [] if out.get("field") == f"images.{name}.index_url"]
    if left:
        return (f"that index did not answer when it was built ({left[0].get('reason', 'no answer')}), so pip "
                "took PyPI's wheel of the same version")
    if used["torch_index_used"] is None:
        return "torch came from the shared wheelhouse, which held another build of the same version"
    return f"pip took it from {used['torch_index_used']}"


def build_problems(name, image, gpus, driver_cuda, modes, facts):
    """(status, what, fix) of a build (``facts``, else inferred) on these GPUs (``HostGpus``) under this driver, its
    modes."""
    wanted_cpu = image_cuda(image) is None
    problems = [("warn" if p.kind == "cpu" and wanted_cpu else "fail", p.what, p.fix)
                for p in image_problems(name, image, list(gpus.found), driver_cuda, facts, cpu=True)]
    return problems + [("warn", p.what, p.fix) for p in mode_problems(name, image, list(gpus.found), modes)]


def line(name, problems, first, ok_detail):
    """A check from its problems (a fallback's at most warn), or ok with ``ok_detail``."""
    if not first:
        problems = [("warn" if status == "fail" else status, what, fix) for status, what, fix in problems]
    if not problems:
        return Check(name, "ok", ok_detail)
    return worst(name, problems)


def worst(name, problems):
    """One check of ``problems``: the worst status, their whats and their fixes."""
    order = ("info", "warn", "fail")
    status = max((p[0] for p in problems), key=order.index)
    return Check(name, status, "; ".join(p[1] for p in problems), "; ".join(p[2] for p in problems) or None)


def summary(known, gpus, problems=()):
    """The build, and whether it runs here: said only when no problem says otherwise."""
    return f"{known.torch}, {build_name(known)} ({known.source})" + ("" if problems else f": {runs(gpus)}")


def build_name(known):
    return f"CUDA {known.cuda}" if known.cuda else "a CPU build"


def runs(gpus):
    if gpus.found:
        return "runs on these GPUs"
    if gpus.left_out:
        return f"checked for the CPU, which a run here uses: {gpus.left_out}"
    return "no GPU here to check it against"
