"""``matrixbench doctor``: what to fix on a rented GPU machine before the bill starts.

A checklist, each item ``ok``, ``warn`` (measurements would be weaker) or ``fail`` (cells would
fail or measure the wrong thing), every one not ok with its fix. Facts come from
``nvidia-smi`` (queried by ``matrixbench.gpu``, the one place that asks for the host's GPUs),
the Docker daemon and the matrix; the commands are run through one ``Commands`` seam so tests
replay recorded outputs.
"""
import json
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
from matrixbench.build.indexes import from_labels as indexes_used
from matrixbench.errors import MatrixbenchError
from matrixbench.gpu import compute_apps, query_gpus, run_command

AUTO = "auto"             # --backend auto: docker when it answers, else venvs
IMAGE_DISK_GIB = 10       # one image's torch CUDA build and its layers, to build
# One venv's torch CUDA build with its wheels in the wheelhouse: a fresh make matrix (stop 22, the CPU smoke
# matrix's two images from PyPI's CUDA wheels) left 9.6 GB of venvs (4.6 and 5.1) and 4.9 GB of wheels.
VENV_DISK_GIB = 7.5
RESULTS_DISK_GIB = 5      # results, compile and HF caches
DRIVER = "driver and GPUs"


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
        return [], Check(DRIVER, "fail", "nvidia-smi finds no NVIDIA GPU" if gpus is not None
                         else "nvidia-smi is not installed",
                         "install the NVIDIA driver (e.g. `sudo apt-get install nvidia-driver-550`), reboot, "
                         "and check that `nvidia-smi` lists the GPUs")
    listing = "; ".join(f"{g.index}: {g.name} ({g.uuid})" for g in gpus)
    return gpus, Check(DRIVER, "ok", f"driver {gpus[0].driver}, {len(gpus)} GPU(s): {listing}")


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


def first_backend(client, container_check, backend=AUTO):
    """The backend a run here tries first (environments.auto.choose): the one given, else docker when the
    daemon answers (and, on a GPU host, hands the GPUs to a container), else venv."""
    if backend != AUTO:
        return backend
    if client is None or (container_check is not None and container_check.status != "ok"
                          and "sees none" in container_check.detail):
        return "venv"
    return "docker"


def check_backend(client, container_check, backend=AUTO, unbuilt=()):
    """Which backend runs the matrix on this machine, and why; ``unbuilt``: its images not built yet."""
    first = first_backend(client, container_check, backend)
    todo = f"; a run builds {', '.join(unbuilt)} first" if unbuilt else ""
    if backend != AUTO:
        return Check("backend", "info", f"{backend} (--backend {backend}){todo}")
    if first == "venv":
        why = ("Docker does not answer" if client is None else "Docker cannot hand the GPUs to a container")
        return Check("backend", "info", f"venv: {why}{todo}")
    gpus = " and hands the GPUs to containers" if container_check is not None and container_check.status == "ok" else ""
    fallback = "; where a Docker build fails, the venvs" if unbuilt else ""
    return Check("backend", "info", f"docker: the daemon answers{gpus}{todo}{fallback}")


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
    """One matrix image for the local backend (neither its Docker image nor its venv runs): its CUDA build
    (``facts``, else inferred from the entry) against this driver and these GPUs (matrixbench.build.cuda_builds).
    A CPU build fails on a GPU host when the entry asked for a CUDA one, and warns when it asked for the CPU."""
    known = known_build(image, facts)
    problems = build_problems(name, image, gpus, driver_cuda, modes, facts)
    _add_not_as_asked(problems, image, known, f"{known.torch} is another build than the entry asks for")
    if not problems:
        return Check(f"image {name}", "ok", f"{known.torch}, {_build_name(known)} ({known.source}): "
                     f"{'runs on these GPUs' if gpus else 'no GPU here to check it against'}")
    return _worst(f"image {name}", problems)


def _add_not_as_asked(problems, image, known, what):
    """A warning ``what`` where the build is not the one the entry asks for (not_as_asked), unless a GPU
    problem's fix already says so."""
    other = not_as_asked(image, known)
    if other and not any(other in p[2] for p in problems):
        problems.append(("warn", what, other.removeprefix("note: ")))


def build_problems(name, image, gpus, driver_cuda, modes, facts):
    """(status, what, fix) of a build (``facts``, else inferred) on these GPUs under this driver, its modes."""
    wanted_cpu = image_cuda(image) is None
    problems = [("warn" if p.kind == "cpu" and wanted_cpu else "fail", p.what, p.fix)
                for p in image_problems(name, image, gpus, driver_cuda, facts, cpu=True)]
    return problems + [("warn", p.what, p.fix) for p in mode_problems(name, image, gpus, modes)]


def check_docker_image(name, image, gpus, driver_cuda, client, modes=(), first=True):
    """The Docker image of one entry: built or not (the Docker fix), and its build (its label, else inferred)
    against this driver and these GPUs. ``first``: Docker is what a run here tries first."""
    from matrixbench.build.images import image_tag

    tag = image_tag(name)
    info = client.inspect_image(tag)
    facts = recorded_facts(image, "docker", client) if info else None
    known = known_build(image, facts)
    problems = build_problems(name, image, gpus, driver_cuda, modes, facts)
    used = indexes_used(getattr(info, "labels", None) or {}) if info else {}
    if used:    # its label says which indexes its build used
        _add_why_not_as_asked(problems, name, image, known, used, gpus, "docker")
    else:
        _add_not_as_asked(problems, image, known, f"{tag} holds {known.torch}, another build than the entry asks for")
    if not info and not first:
        return Check(f"image {name} (Docker)", "info", f"{tag} is not built (a run here uses the venvs)",
                     f"`matrixbench build --images {name}`")
    if not info:
        problems.insert(0, ("warn", f"{tag} is not built; a run builds it first: {_summary(known, gpus, problems)}",
                            f"`matrixbench build --images {name}`"))
    return _line(f"image {name} (Docker)", problems, first,
                 f"{tag} built: {_summary(known, gpus)}")


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
        return _worst(f"image {name} (venv)", [
            ("warn", f"not built ({plan.path}); a run builds it first: {_summary(known_build(image), gpus, problems)}",
             f"`matrixbench build --backend venv --images {name}`"), *problems])
    known = known_build(image, venv.facts)
    problems = build_problems(name, image, gpus, driver_cuda, modes, venv.facts)
    _add_why_not_as_asked(problems, name, image, known, _marker(plan), gpus, "venv")
    return _line(f"image {name} (venv)", problems, first,
                 f"built ({plan.path}): {_summary(known, gpus)}")


# A build's record of the indexes it used (indexes.Indexes.record), by backend: where it is kept, and the rebuild
RECORDS = {"venv": ("its marker", "matrixbench build --backend venv --no-cache"),
           "docker": ("its label", "matrixbench build --no-cache")}


def _add_why_not_as_asked(problems, name, image, known, used, gpus, backend):
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
    if not gpus and not asked:
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


def _marker(plan):
    try:
        data = json.loads(plan.marker.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _line(name, problems, first, ok_detail):
    """A check from its problems (a fallback's at most warn), or ok with ``ok_detail``."""
    if not first:
        problems = [("warn" if status == "fail" else status, what, fix) for status, what, fix in problems]
    if not problems:
        return Check(name, "ok", ok_detail)
    return _worst(name, problems)


def _worst(name, problems):
    order = ("info", "warn", "fail")
    worst = max((p[0] for p in problems), key=order.index)
    return Check(name, worst, "; ".join(p[1] for p in problems), "; ".join(p[2] for p in problems) or None)


def _summary(known, gpus, problems=()):
    """The build, and whether it runs here: said only when no problem says otherwise."""
    return f"{known.torch}, {_build_name(known)} ({known.source})" + ("" if problems else f": {_runs(gpus)}")


def _build_name(known):
    return f"CUDA {known.cuda}" if known.cuda else "a CPU build"


def _runs(gpus):
    return "runs on these GPUs" if gpus else "no GPU here to check it against"


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


def check_disk(commands, unbuilt, path, backend="docker"):
    """Room for ``unbuilt`` images of ``backend`` (docker: IMAGE_DISK_GIB each, under Docker's root; venv:
    VENV_DISK_GIB each, under the cache) and for results and caches, at ``path``."""
    free_gib = commands.disk_free(str(path)) / 2**30
    each = VENV_DISK_GIB if backend == "venv" else IMAGE_DISK_GIB
    need = unbuilt * each + RESULTS_DISK_GIB
    kind = "venv(s)" if backend == "venv" else "image(s)"
    if free_gib < need:
        fix = ("free space (`matrixbench clean --venvs`, or old wheels in the wheelhouse), or use a larger disk"
               if backend == "venv" else "free space (`docker system prune`), or use a larger disk")
        return Check("free disk", "fail", f"{free_gib:.0f} GiB free at {path}, {need:g} GiB needed "
                     f"({unbuilt} {kind} to build at ~{each:g} GiB, results and caches)", fix)
    return Check("free disk", "ok", f"{free_gib:.0f} GiB free at {path} ({need:g} GiB needed)")


def _existing(path):
    """``path``, or its nearest existing parent (where a folder not made yet will be)."""
    path = Path(path)
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def check_hf(environ, hf_cache):
    token = "set (passed to containers at run time only)" if environ.get("HF_TOKEN") else "not set"
    return Check("Hugging Face", "info", f"cache at {hf_cache}; HF_TOKEN {token}",
                 None if environ.get("HF_TOKEN") else "only needed for gated models with weights: pretrained")


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
    client, docker_check = check_docker(connect or _connect, backend)
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

        disk_path = _existing(venv_root or venvs_root(commands.environ))
    else:
        disk_path = docker_root if os.path.isdir(docker_root) else "."
    checks += [check_disk(commands, len(unbuilt), disk_path, first),
               check_hf(commands.environ, hf_cache or _hf_cache())]
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


def _connect():
    from matrixbench.build import docker_client

    return docker_client.connect()


def _hf_cache():
    from matrixbench.paths import hf_cache_home

    return Path(hf_cache_home())
