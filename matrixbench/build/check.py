"""The model check: every model built on the meta device (no memory, no weights, no timing) in each
environment, with its own torch and transformers, each failure named by image and model, so that a
broken config, or a model an image's transformers lacks, is found before a GPU is paid for.

Two callers: ``matrixbench validate --build`` (every model of the matrix, in every image) and
``matrixbench run`` (``refuse_unbuildable``: the models of the pending cells, in the environment of each
image that has some, before any cell runs; but a shipped model with random weights in an image of a transformers
within the releases the project's own images span, ``needs_run_check``: a run of only those starts no check
runner). Both ask the runner's ``--check`` (runner/check.py), started through a backend exactly as a run starts the
runner: the docker backend runs it in a container of each built image, the venv backend in each image's venv, the
local backend once in this interpreter (image "local"); an A/A twin is checked in its original's build. The answer is
``check.json`` (runner.schema.CHECK_SCHEMA, versioned), vouched for by ``results_files.read_check``.

What a run does with a model that does not build: it refuses to start, naming the model, the image,
its torch and transformers, the error and the fix (a transformers that knows it, a config that builds, or
``--models`` / ``--images`` leaving it out). As with the run's other per-environment failures (an image not
built, a venv of the wrong torch, CUDA builds this GPU cannot run), nothing has run when it says so, and
nothing is skipped without being asked: ``--models`` is how the rest of the matrix runs.
"""
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Set, Tuple, Type

from packaging.specifiers import SpecifierSet

from matrixbench.build.versions import pinned_version
from matrixbench.environments import create_backend
from matrixbench.environments.base import Backend, ImageRef, Paths, RunRequest, Starter, Work
from matrixbench.environments.environment import runtime_secrets
from matrixbench.errors import MatrixbenchError, MatrixError, RunError
from matrixbench.matrix import Matrix, expand_cells, runner_settings
from matrixbench.paths import hf_cache_home
from matrixbench.run.launch import last_line, launch
from matrixbench.run.pending import ImageWork
from matrixbench.run.results_files import read_check
from runner.core import Cell
from runner.registry import shipped_spec
from runner.schema import CHECK_FILENAME, RecordError

LOCAL_IMAGE = "local"


@dataclass(frozen=True)
class ModelBuild:
    """One model's answer: ``error`` ("Type: message"), or None when it builds on the meta device."""

    model: str
    error: Optional[str]


@dataclass(frozen=True)
class EnvironmentCheck:
    """One environment's answer: the image it was asked for (``local``: this interpreter), its torch and
    transformers, and each model's build."""

    image_name: str
    torch: str
    transformers: str
    models: Tuple[ModelBuild, ...]

    @property
    def versions(self) -> str:
        return f"torch {self.torch}, transformers {self.transformers}"

    def failures(self) -> List[ModelBuild]:
        return [model for model in self.models if model.error is not None]


def build_models(matrix: Matrix, backend: object = "docker",
                 environ: Optional[Mapping[str, str]] = None) -> List[EnvironmentCheck]:
    """``validate --build``: every model of the matrix in every image (``backend``: a name or a Backend;
    ``environ``, default os.environ: where HF_TOKEN comes from, passed to the runner at run time only)."""
    backend = create_backend(backend) if isinstance(backend, str) else backend
    assert isinstance(backend, Backend)
    environ = os.environ if environ is None else environ
    cells = one_cell_per_model(expand_cells(matrix))
    with tempfile.TemporaryDirectory(prefix="matrixbench-build-check-") as folder:
        secrets = runtime_secrets(environ)
        requests = [_request(image, cells, matrix, Path(folder), {**_image_env(matrix, image), **secrets})
                    for image in environment_images(backend.name, _refs(matrix, list(matrix.images)))]
        backend.prepare([matrix.images[request.image.name] for request in requests
                         if request.image.name in matrix.images])
        return [check_in(backend, request, "validate --build") for request in requests]


def refuse_unbuildable(environment: Starter, requests: Sequence[RunRequest], note: Callable[[str], None]) -> None:
    """``matrixbench run``, before any cell: ask each request's environment (one per built environment:
    ``environment_images``) whether each of its models builds; MatrixError naming each one that does not."""
    models = list(dict.fromkeys(cell.model for request in requests for cell in request.work.cells))
    note(f"model check: building {', '.join(models)} on the meta device in {len(requests)} environment(s) (no "
         "weights, no timing; shipped models with random weights are not asked)")
    checks = [check_in(environment, request, "run", RunError) for request in requests]
    for check in checks:
        built = [model.model for model in check.models if model.error is None]
        if built:
            note(f"model check: image {check.image_name} ({check.versions}): {', '.join(built)} "
                 f"build{'s' if len(built) == 1 else ''} on the meta device")
    failed = {model.model for check in checks for model in check.failures()}
    if failed:
        raise MatrixError(_refusal(checks, failed))


def _refusal(checks: Sequence[EnvironmentCheck], failed: Set[str]) -> str:
    lines = [f"  model {model.model} in image {check.image_name} ({check.versions}): {model.error}"
             for check in checks for model in check.failures()]
    return (f"{len(lines)} model build(s) fail before any cell ran (the runner's model check, on the meta device; "
            "nothing was measured):\n" + "\n".join(lines) + "\nFix: an image whose transformers knows the model "
            "(its `transformers:` pin) and a config that builds for its task (`matrixbench validate --build` checks "
            f"again), or run the rest without it: --models leaving out {', '.join(sorted(failed))} (or --images "
            "leaving out the image)")


def check_in(environment: Starter, request: RunRequest, command: str,
             error: Type[MatrixbenchError] = MatrixError) -> EnvironmentCheck:
    """Start the runner's --check for ``request`` and read its answer (vouched for); ``error`` when the runner
    gives none (the run's: a RunError, as a runner that cannot start its cells)."""
    outcome = launch(environment, request)
    if not outcome.complete:
        raise error(f"{command}: image {request.image.name!r}: the runner could not check the models (runner exit "
                    f"code {outcome.exit_code}: {last_line(outcome.log_tail)}); its log's end:\n{outcome.log_tail}")
    try:
        answer = read_check(Path(request.paths.out_dir) / CHECK_FILENAME)
    except RecordError as exc:
        raise error(f"{command}: image {request.image.name!r}: the model check's answer: {exc}") from None
    return EnvironmentCheck(request.image.name, str(answer["torch"]), str(answer["transformers"]),
                            tuple(ModelBuild(str(entry["model"]), entry["error"])
                                  for entry in _entries(answer["models"])))


def _entries(models: object) -> List[Dict[str, Optional[str]]]:
    return list(models) if isinstance(models, list) else []


def environment_images(backend_name: str, images: Sequence[ImageRef]) -> List[ImageRef]:
    """The images to ask, one per environment (``environment_image``), in ``images``' order."""
    first: Dict[str, ImageRef] = {}
    for image in images:
        first.setdefault(environment_image(backend_name, image).built_as, environment_image(backend_name, image))
    return list(first.values())


def environment_image(backend_name: str, image: ImageRef) -> ImageRef:
    """The image the check asks for ``image``'s environment: the local backend has one (this interpreter,
    named "local"); docker and venv one per build (an A/A twin runs in its original's: ``built_as``)."""
    return ImageRef(LOCAL_IMAGE) if backend_name == LOCAL_IMAGE else image


def check_paths(folder: Path, hf_cache_dir: Optional[Path] = None) -> Paths:
    """Where one environment's check writes its answer (and its runner's log): ``folder``."""
    return Paths(folder, hf_cache_dir=hf_cache_dir or hf_cache_home())


def check_work(cells: Sequence[Cell], matrix: Matrix) -> Work:
    """The check asked of a runner: one cell per model, on the CPU settings (nothing is timed)."""
    return Work(one_cell_per_model(cells), runner_settings(matrix, "cpu"), check=True)


# The transformers releases the images of the project's matrix.yaml span (seed 4.31.0, the first that builds all 11
# shipped configs, to latest 5.23.0; tests/test_build_check.py keeps the two alike): the shipped configs
# (runner/configs) are built with releases between them, ends included.
SHIPPED_TRANSFORMERS = SpecifierSet(">=4.31.0,<=5.23.0")


def needs_run_check(cell: Cell, transformers: str) -> bool:
    """Whether the run checks the cell's model in an image whose entry asks for ``transformers`` (a requirement):
    every model but a shipped one with random weights in an image pinned to a transformers within the releases the
    project's own images span (SHIPPED_TRANSFORMERS), which build the configs matrixbench ships with the classes
    they name. A shipped model in an image of another transformers (older ones lack classes or cannot build a config:
    4.30.2 cannot build conditional-detr's), or of a range, is checked like a user's own; ``validate --build`` checks
    every model in any image."""
    shipped = cell.weights == "random" and shipped_spec(cell.model, cell.model_id, cell.config_path) is not None
    version = pinned_version(transformers)
    return not (shipped and version is not None and SHIPPED_TRANSFORMERS.contains(version, prereleases=True))


def cells_to_check(work: ImageWork, matrix: Matrix) -> List[Cell]:
    """The pending cells of ``work`` whose models a run checks before any cell (``needs_run_check``, with the
    transformers its image's entry asks for): the run's check and its dry run's count, one rule."""
    transformers = matrix.images[work.image_name].transformers
    return [repeat.cell for repeat in work.pending if needs_run_check(repeat.cell, transformers)]


def one_cell_per_model(cells: Sequence[Cell]) -> List[Cell]:
    first: Dict[str, Cell] = {}
    for cell in cells:
        first.setdefault(cell.model, cell)
    return list(first.values())


def _refs(matrix: Matrix, names: Sequence[str]) -> List[ImageRef]:
    return [ImageRef(name, torch=matrix.images[name].torch, content_hash=matrix.images[name].content_hash(),
                     build_of=matrix.images[name].build_of) for name in names]


def _image_env(matrix: Matrix, image: ImageRef) -> Dict[str, str]:
    return dict(matrix.images[image.name].env) if image.name in matrix.images else {}


def _request(image: ImageRef, cells: Sequence[Cell], matrix: Matrix, folder: Path, env: Dict[str, str]) -> RunRequest:
    return RunRequest(image, check_work(cells, matrix), check_paths(folder / image.name), env=env)


def describe_build(checks: Sequence[EnvironmentCheck]) -> str:
    """One line per model that builds, per image."""
    return "\n".join(f"  image {check.image_name} ({check.versions}): model {entry.model}: "
                     "builds on the meta device" for check in checks for entry in check.models
                     if entry.error is None)


def check_built(checks: Sequence[EnvironmentCheck]) -> None:
    """MatrixError listing, per image, the models that do not build, each with its error."""
    failures = [f"  image {check.image_name} ({check.versions}): model {entry.model}: does not build: "
                f"{entry.error}" for check in checks for entry in check.failures()]
    if failures:
        raise MatrixError(f"{len(failures)} model build(s) of the matrix fail:\n" + "\n".join(failures))
