"""Backend registry: a backend name -> a factory.

``create_backend(name)`` rejects unknown names with the list of valid ones. The docker
backend is imported only when asked for, so the local backend works without the docker SDK.
"""
from matrixbench.errors import RunError


def _local():
    from matrixbench.environments.local import LocalBackend

    return LocalBackend()


def _docker():
    try:
        from matrixbench.environments.docker import DockerBackend
    except ImportError as exc:
        raise RunError(f"the docker backend cannot be loaded ({exc}); use --backend local") from exc
    return DockerBackend()


def _venv():
    from matrixbench.environments.venv import VenvBackend

    return VenvBackend()


def _ray(**settings):
    from matrixbench.executors.ray.executor import RayBackend  # imports ray only when it connects

    return RayBackend(**settings)


FACTORIES = {"docker": _docker, "local": _local, "venv": _venv, "ray": _ray}


def backend_names():
    return sorted(FACTORIES)


def create_backend(name, **settings):
    """The backend called ``name``; everything a run needs comes in its RunRequest (the ray backend
    alone takes ``settings``: its cluster's address and what runs on its nodes)."""
    if name not in FACTORIES:
        raise RunError(f"unknown backend {name!r}; valid: {', '.join(backend_names())}")
    return FACTORIES[name](**settings)
