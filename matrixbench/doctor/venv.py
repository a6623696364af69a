"""Each entry's venv (build.venvs): built or not, the torch build its marker recorded against what the entry asks
for (and why they differ, as far as the marker says), and against this driver and these GPUs."""
import json

from matrixbench.build.cuda_builds import known_build
from matrixbench.doctor.check import Check
from matrixbench.doctor.images import add_why_not_as_asked, build_problems, line, summary, worst


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
    add_why_not_as_asked(problems, name, image, known, _marker(plan), gpus, "venv")
    return line(f"image {name} (venv)", problems, first,
                f"built ({plan.path}): {summary(known, gpus)}")


def _marker(plan):
    try:
        data = json.loads(plan.marker.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
