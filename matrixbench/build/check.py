"""``matrixbench validate --build``: every model of the matrix built on the meta device (no
memory, no weights) in each image, with the image's own torch and transformers, each failure
named by image and model, so that a broken config, or a model an image's transformers lacks, is
found before a GPU is paid for.

The check is the runner's ``--check`` (runner/check.py), started through a backend exactly as a
run starts the runner: the docker backend runs it in a container of each built image, the venv
backend in each image's venv, the local backend once in this interpreter (image "local").
"""
import json
import os
import tempfile
from pathlib import Path

from matrixbench.environments import create_backend
from matrixbench.environments.base import ImageRef, Paths, RunRequest, Work
from matrixbench.environments.environment import runtime_secrets
from matrixbench.errors import MatrixError
from matrixbench.matrix import expand_cells, runner_settings
from matrixbench.paths import hf_cache_home
from matrixbench.run.launch import launch
from runner.schema import CHECK_FILENAME

LOCAL_IMAGE = "local"
LOG_TAIL_LINES = 15


def build_models(matrix, backend="docker", environ=None):
    """[{"image_name", "torch", "models": [{"model", "size", "weights", "error"}]}], one per image
    the check ran in. ``backend``: a backend name or a Backend; ``environ`` (default os.environ):
    where HF_TOKEN comes from, passed to the runner at run time only."""
    backend = create_backend(backend) if isinstance(backend, str) else backend
    environ = os.environ if environ is None else environ
    with tempfile.TemporaryDirectory(prefix="matrixbench-build-check-") as folder:
        requests = _requests(matrix, backend.name, environ, Path(folder))
        backend.prepare([matrix.images[request.image.name] for request in requests
                         if request.image.name in matrix.images])
        return [_check(backend, request) for request in requests]


def _requests(matrix, backend_name, environ, folder):
    """One check per image (the local backend: one, in this interpreter, whatever the images pin)."""
    work = Work(_one_cell_per_model(matrix), runner_settings(matrix, "cpu"), check=True)
    secrets = runtime_secrets(environ)
    if backend_name == "local":
        return [_request(ImageRef(LOCAL_IMAGE), work, folder, secrets)]
    return [_request(ImageRef(name, torch=image.torch, content_hash=image.content_hash()), work, folder,
                     {**image.env, **secrets})
            for name, image in matrix.images.items()]


def _request(image, work, folder, env):
    return RunRequest(image, work, Paths(folder / image.name, hf_cache_dir=hf_cache_home()), env=env)


def _check(backend, request):
    outcome = launch(backend, request)
    if not outcome.complete:
        raise MatrixError(f"validate --build: image {request.image.name!r}: the runner could not check the "
                          f"models (exit code {outcome.exit_code}):\n{outcome.log_tail}")
    return {**json.loads((request.paths.out_dir / CHECK_FILENAME).read_text()), "image_name": request.image.name}


def describe_build(checks):
    """One line per model that builds, per image."""
    return "\n".join(f"  image {check['image_name']} (torch {check['torch']}): model {entry['model']}: "
                     "builds on the meta device" for check in checks for entry in check["models"]
                     if entry["error"] is None)


def check_built(checks):
    """MatrixError listing, per image, the models that do not build, each with its error."""
    failures = [f"  image {check['image_name']} (torch {check['torch']}): model {entry['model']}: does not build: "
                f"{entry['error']}" for check in checks for entry in check["models"] if entry["error"] is not None]
    if failures:
        raise MatrixError(f"{len(failures)} model build(s) of the matrix fail:\n" + "\n".join(failures))


def _one_cell_per_model(matrix):
    cells = {}
    for cell in expand_cells(matrix):
        cells.setdefault(cell.model, cell)
    return list(cells.values())
