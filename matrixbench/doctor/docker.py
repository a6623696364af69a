"""Docker: the daemon answers, a container of a matrix image sees the GPUs, and each entry's Docker image is
built (its build, from its label or inferred, against this driver and these GPUs)."""
from matrixbench.build.cuda_builds import known_build, recorded_facts
from matrixbench.build.indexes import from_labels as indexes_used
from matrixbench.doctor.backend import skipped_by_variable
from matrixbench.doctor.check import Check
from matrixbench.doctor.images import add_not_as_asked, add_why_not_as_asked, build_problems, line, summary
from matrixbench.environments.auto import AUTO
from matrixbench.errors import MatrixbenchError


def check_docker(connect, backend=AUTO, skip=frozenset()):
    """Docker answers; when it does not, a failure only for ``--backend docker``: otherwise the venv
    backend runs the images (and still compares their torch versions). Not asked where ``skip``
    (MATRIXBENCH_AUTO_SKIP, doctor.backend.skip_of) skips Docker, as ``run --backend auto`` does not ask it."""
    if backend in ("venv", "local"):
        return None, Check("Docker", "info", f"not checked (--backend {backend})")
    if "docker" in skip:
        return None, Check("Docker", "info", f"not checked: {skipped_by_variable('Docker', skip)}, as "
                           "`run --backend auto` skips it")
    try:
        return connect(), Check("Docker", "ok", "the daemon answers")
    except MatrixbenchError as exc:
        reason, fix = str(exc).split(";")[0], str(exc).split(";", 1)[-1].strip()
        if backend == "docker":
            return None, Check("Docker", "fail", reason, fix)
        return None, Check("Docker", "warn", f"{reason}: the venv backend runs instead (one virtual "
                           "environment per image, the same torch comparison)", f"for containers: {fix}")


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


def sees_gpus(container_check):
    """False where a container asking for GPUs saw none; True where it saw them, or was not asked."""
    return not (container_check is not None and container_check.status != "ok"
                and "sees none" in container_check.detail)


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
        add_why_not_as_asked(problems, name, image, known, used, gpus, "docker")
    else:
        add_not_as_asked(problems, image, known, f"{tag} holds {known.torch}, another build than the entry asks for")
    if not info and not first:
        return Check(f"image {name} (Docker)", "info", f"{tag} is not built (a run here uses the venvs)",
                     f"`matrixbench build --images {name}`")
    if not info:
        problems.insert(0, ("warn", f"{tag} is not built; a run builds it first: {summary(known, gpus, problems)}",
                            f"`matrixbench build --images {name}`"))
    return line(f"image {name} (Docker)", problems, first,
                f"{tag} built: {summary(known, gpus)}")


def connect():
    """The Docker daemon's client (build.docker_client); raises DockerUnavailableError when none answers."""
    from matrixbench.build import docker_client

    return docker_client.connect()
