"""How one image's runner starts (``--backend``): docker (a container of the image), venv (a virtual
environment built from its pins) or local (this interpreter). Each has ``prepare(images)``, ``run(request)``
(the runner's exit code; ``matrixbench.run.launch`` judges what it means), ``stop_all()`` and
``stop_leftovers()``; ``environment.py`` is the one home of the allow-list, the secrets and redaction.

``create_backend(name)`` rejects unknown names with the list of valid ones. The docker
environment is imported only when asked for, so the local one works without the docker SDK.
"""
from typing import Callable, Dict, List, Optional

from matrixbench.build.images import BuildOptions
from matrixbench.environments.base import Backend
from matrixbench.errors import RunError


def _local(build_options: Optional[BuildOptions] = None, run_id: Optional[str] = None) -> Backend:
    from matrixbench.environments.local import LocalBackend

    return LocalBackend()


def _docker(build_options: Optional[BuildOptions] = None, run_id: Optional[str] = None) -> Backend:
    try:
        from matrixbench.environments.docker import DockerBackend
    except ImportError as exc:
        raise RunError(f"the docker backend cannot be loaded ({exc}); use --backend local") from exc
    return DockerBackend(run_id=run_id)


def _venv(build_options: Optional[BuildOptions] = None, run_id: Optional[str] = None) -> Backend:
    from matrixbench.environments.venv import VenvBackend

    return VenvBackend(build_options=build_options)


Factory = Callable[[Optional[BuildOptions], Optional[str]], Backend]   # (build options, run id) -> backend
FACTORIES: Dict[str, Factory] = {"docker": _docker, "local": _local, "venv": _venv}


def backend_names() -> List[str]:
    return sorted(FACTORIES)


def create_backend(name: str, build_options: Optional[BuildOptions] = None, run_id: Optional[str] = None) -> Backend:
    """The environment called ``name`` (docker, local, venv); everything a run needs comes in its RunRequest.
    ``build_options`` (images.BuildOptions, the matrix's build settings): how the venv environment builds a venv
    that ``prepare`` finds missing (Docker images are built by ``matrixbench build`` alone). ``run_id``: the run's
    name where the request's folders do not say it (a Ray node runs in a scratch folder): the docker environment
    labels and names its containers with it, so `matrixbench clean --run` and a look at `docker ps` find them."""
    if name not in FACTORIES:
        raise RunError(f"unknown backend {name!r}; valid: {', '.join(backend_names())}")
    return FACTORIES[name](build_options, run_id)
