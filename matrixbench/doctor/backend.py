"""Which backend runs the matrix on this machine (``--backend``, or what ``--backend auto`` picks), and why."""
from matrixbench.doctor.check import Check
from matrixbench.environments.auto import AUTO


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
