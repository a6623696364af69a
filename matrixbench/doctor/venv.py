"""Each entry's venv (build.venvs): built or not, the torch build its marker recorded against what the entry asks
for (and why they differ, as far as the marker says), and against this driver and these GPUs."""
import json

from matrixbench.build.cuda_builds import image_cuda, known_build, not_as_asked
from matrixbench.doctor.check import Check
from matrixbench.doctor.images import build_problems, line, summary, worst


def check_venv(name, image, gpus, driver_cuda, modes=(), first=True, root=None):
    """The venv of one entry (build.venvs): built or not (the venv fix), the torch build its marker recorded
    against what the entry asks for (and why they differ, as far as the marker says), and against this driver
    and these GPUs. ``first``: venvs are what a run here tries first; else a fallback."""
    from matrixbench.build import venvs

    plan = venvs.plan_venv(image, root=root)
    venv = venvs.read_marker(plan)
    if venv is None:
        if not first:
            return Check(f"image {name} (venv)", "info", f"not built ({plan.path}); a run builds it only where "
                         "the Docker build fails")
        problems = build_problems(name, image, gpus, driver_cuda, modes, None)
        return worst(f"image {name} (venv)", [
            ("warn", f"not built ({plan.path}); a run builds it first: {summary(known_build(image), gpus, problems)}",
             f"`matrixbench build --backend venv --images {name}`"), *problems])
    known = known_build(image, venv.facts)
    problems = build_problems(name, image, gpus, driver_cuda, modes, venv.facts)
    other = not_as_asked(image, known)
    if other and not any(other in p[2] for p in problems):
        problems.append(venv_not_as_asked(name, image, known, _marker(plan), gpus))
    return line(f"image {name} (venv)", problems, first,
                f"built ({plan.path}): {summary(known, gpus)}")


def venv_not_as_asked(name, image, known, marker, gpus):
    """(warn, what, fix): the venv holds another torch build than its entry asks for; why, from its marker."""
    asked = image_cuda(image)
    index = (image.index_url or "PyPI").rstrip("/")
    held = f"CUDA {known.cuda}" if known.cuda else "CPU"
    what = (f"it holds {known.torch}, a {held} build, but the entry asks for the "
            f"{f'CUDA {asked}' if asked else 'CPU'} build of {index}: {_why_other(name, marker)}")
    if not gpus and not asked:
        what += (f"; without a GPU it runs on the CPU all the same, and each record names the torch that ran "
                 f"({known.torch.split()[-1]}), so a CPU smoke run is sound")
    version = known.torch.split()[-1].split("+")[0]
    tag = f"cu{asked.replace('.', '')}" if asked else "cpu"
    return ("warn", what, f"once {index} answers: `matrixbench build --backend venv --no-cache --images {name}` "
            f"(or pin images.{name}.torch to torch=={version}+{tag})")


def _why_other(name, marker):
    """Why a venv got another build, as far as its marker (``torch_index_used``, ``indexes_left_out``) says."""
    if "torch_index_used" not in marker:
        return ("its marker does not say why (built before venvs recorded the indexes they used): that index "
                "did not answer, or the shared wheelhouse held PyPI's wheel of the same version")
    left = [out for out in marker.get("indexes_left_out") or [] if out.get("field") == f"images.{name}.index_url"]
    if left:
        return (f"that index did not answer when it was built ({left[0].get('reason', 'no answer')}), so pip "
                "took PyPI's wheel of the same version")
    if marker["torch_index_used"] is None:
        return "torch came from the shared wheelhouse, which held another build of the same version"
    return f"pip took it from {marker['torch_index_used']}"


def _marker(plan):
    try:
        data = json.loads(plan.marker.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
