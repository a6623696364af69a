"""Backend registry: a backend name -> a factory taking the (overridden) Matrix (which a backend may ignore).

``create_backend(name, matrix)`` rejects unknown names with the list of valid ones. The docker
backend is imported only when asked for, so the local backend works without the docker SDK.
"""
from matrixbench.errors import RunError


def _local(matrix):
    from matrixbench.backends.local import LocalBackend

    return LocalBackend()


def _docker(matrix):
    try:
        from matrixbench.backends.docker import DockerBackend
    except ImportError as exc:
        raise RunError(f"the docker backend cannot be loaded ({exc}); use --backend local") from exc
    return DockerBackend()


FACTORIES = {"docker": _docker, "local": _local}


def backend_names():
    return sorted(FACTORIES)


def create_backend(name, matrix=None):
    """The backend called ``name``, built for ``matrix``."""
    if name not in FACTORIES:
        raise RunError(f"unknown backend {name!r}; valid: {', '.join(backend_names())}")
    return FACTORIES[name](matrix)
