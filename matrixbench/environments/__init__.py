"""How one image's runner starts (``--backend``): docker (a container of the image), venv (a virtual
environment built from its pins) or local (this interpreter). Each has ``prepare(images)``, ``run(request)``
(the runner's exit code; ``matrixbench.launch`` judges what it means), ``stop_all()`` and
``stop_leftovers()``; ``environment.py`` is the one home of the allow-list, the secrets and redaction.

``create_backend(name)`` rejects unknown names with the list of valid ones. The docker
environment is imported only when asked for, so the local one works without the docker SDK.
"""
from typing import Callable, Dict, List

from matrixbench.environments.base import Backend
from matrixbench.errors import RunError


def _local() -> Backend:
    from matrixbench.environments.local import LocalBackend

    return LocalBackend()


def _docker() -> Backend:
    try:
        from matrixbench.environments.docker import DockerBackend
    except ImportError as exc:
        raise RunError(f"the docker backend cannot be loaded ({exc}); use --backend local") from exc
    return DockerBackend()


def _venv() -> Backend:
    from matrixbench.environments.venv import VenvBackend

    return VenvBackend()


FACTORIES: Dict[str, Callable[[], Backend]] = {"docker": _docker, "local": _local, "venv": _venv}


def backend_names() -> List[str]:
    return sorted(FACTORIES)


def create_backend(name: str) -> Backend:
    """The environment called ``name`` (docker, local, venv); everything a run needs comes in its RunRequest."""
    if name not in FACTORIES:
        raise RunError(f"unknown backend {name!r}; valid: {', '.join(backend_names())}")
    return FACTORIES[name]()
