"""matrix.yaml: load it with CLI overrides, validate the merged result once, expand it into cells.

``load_matrix(path, Overrides(...))`` returns a ``Matrix``: the overrides' values replace the
file's, the merged data is checked once against the schema (a file problem gives
``file:line:col``, an override problem its flag), then ``--images``/``--models`` select.
``cells_by_image(matrix)`` gives each image's ``runner.core.Cell`` list. Every problem raises
``MatrixError`` naming the field path or the flag, and the allowed values.

The package is the matrix wing: its schema (``schema``), the messages of its validation
(``validation``), its strict YAML reader (``strict_yaml``), the host's settings (``settings``), the one
list of comparisons (``comparisons``), prices, bridge images (``attribution``) and A/A twins (``aa``).
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union, cast

from matrixbench.build.versions import pinned_version
from matrixbench.errors import MatrixError
from matrixbench.matrix import attribution
from matrixbench.matrix import strict_yaml as matrix_yaml
from matrixbench.matrix import validation as matrix_errors
from matrixbench.matrix.schema import DEFAULTS, MATRIX_SCHEMA
from matrixbench.matrix.settings import BUILD_SETTINGS, BY_NAME, OVERRIDES, RUNNER_SETTINGS
from matrixbench.paths import model_hash_cache
from matrixbench.redact import redact_urls
from matrixbench.run.layout import MAX_NAME, shorter_name
from runner import axes
from runner.core import Cell
from runner.files import describe_kind, read_bounded_text
from runner.registry import SEED_MODELS, local_model_hash, missing_weights, shipped_spec

JSON = Dict[str, Any]


# turns_cores: auto: a pair's blocks on 1 core with turns (the design the GPU A/A measured: docs/turns.md), none without
AUTO_TURNS_CORES = "auto"
PINNED_CORES = 1


def _default(name: str) -> Any:
    """A matrix field's default, from its declaration (runner.settings)."""
    value = BY_NAME[name].default
    return tuple(value) if isinstance(value, (list, tuple)) else value


@dataclass(frozen=True)
class Image:
    """A named environment: one Docker image with its own torch."""

    name: str
    torch: str
    python: str
    transformers: str
    base_image: str
    index_url: Optional[str] = None
    extra_index_urls: Tuple[str, ...] = ()
    extra_pins: Tuple[str, ...] = ()
    env: Dict[str, str] = field(default_factory=dict)
    description: str = ""
    published: Optional[str] = None   # the report's published source; None: by torch version
    build_of: Optional[str] = None    # an A/A twin (matrixbench.matrix.aa): the image whose build it runs in

    @property
    def torch_version(self) -> Optional[str]:
        """The pinned version ("2.0.1" for "torch==2.0.1"), or None when not pinned exactly."""
        return pinned_version(self.torch)

    def content_hash(self) -> str:
        """Short hash of everything that goes into building this image (for image labels)."""
        build = dataclasses.asdict(self)
        del build["name"], build["description"], build["published"], build["build_of"]
        return _short_hash(build)


@dataclass(frozen=True)
class BuildSettings:
    """The matrix's build scope (``settings.BUILD_SETTINGS``): how images are built, never what is measured."""

    index_url: Optional[str] = None          # pip's index for everything but torch (None: PyPI)
    extra_index_urls: Tuple[str, ...] = ()
    base_image: Optional[str] = None         # every Docker build's, in place of each image's
    ca_bundle: Optional[str] = None          # a PEM file's path (relative ones: to the matrix file)
    registry: Optional[str] = None           # --executor ray, docker nodes: HOST:PORT the images go through

    def image_options(self) -> JSON:
        """The keyword options of ``images.build_images`` / ``venvs.build_venvs``."""
        return {"ca_bundle": self.ca_bundle, "index_url": self.index_url,
                "extra_index_urls": self.extra_index_urls, "base_image": self.base_image}

    def given(self) -> Tuple[str, ...]:
        """The names of the settings that are set."""
        return tuple(name for name, value in dataclasses.asdict(self).items() if value)


@dataclass(frozen=True)
class Model:
    name: str
    task: str
    weights: str
    model_id: Optional[str] = None
    config_path: Optional[str] = None
    model_hash: Optional[str] = None   # a local model's files (runner.registry.local_model_hash)
    revision: Optional[str] = None     # a hub model's revision (branch, tag or commit; None: main)


# Model keys left out of Matrix.to_dict when None: model_hash (a hub or shipped model), revision (none asked).
OPTIONAL_MODEL_KEYS = ("model_hash", "revision")


def _given(model: JSON) -> JSON:
    """A model's dict without the optional keys it does not give: as (and hashing as) before they existed."""
    return {key: value for key, value in model.items() if value is not None or key not in OPTIONAL_MODEL_KEYS}


@dataclass(frozen=True)
class Matrix:
    """A validated matrix; defaults of the settings come from runner.settings."""

    images: Dict[str, Image]
    models: Dict[str, Model]
    batch_sizes: Tuple[int, ...]
    modes: Tuple[str, ...]
    dtypes: Tuple[str, ...] = _default("dtypes")
    size: str = _default("size")
    fullgraph: bool = _default("fullgraph")
    attention: str = _default("attention")
    tf32: bool = _default("tf32")                  # the tf32 axis (runner.axes): TF32 matmuls for every cell
    repeats: Union[str, int] = _default("repeats")   # a count, or "auto" (matrixbench.executors.adaptive)
    repeats_min: int = _default("repeats_min")
    repeats_max: int = _default("repeats_max")
    margin_pct: float = _default("margin_pct")
    iterations: int = _default("iterations")
    warmup: int = _default("warmup")
    timeout_s: float = _default("timeout_s")
    accuracy_tolerance: Optional[float] = _default("accuracy_tolerance")  # None: the dtype's default
    cv_threshold: float = _default("cv_threshold")
    paired: bool = _default("paired")                   # eager and compiled paired in one process (issue 32)
    min_time_s: Union[str, float] = _default("min_time_s")   # the timed loop's minimum duration, or "auto"
    target_stdrel: Optional[float] = _default("target_stdrel")   # noise criterion (None: fixed count)
    max_time_s: float = _default("max_time_s")         # the cap under target_stdrel
    slots: Union[str, int] = _default("slots")     # "auto" or a count (matrixbench.run.placement)
    calibrate: bool = _default("calibrate")         # measure the slots' interference first (executors/calibration.py)
    calibration_models: Tuple[str, ...] = _default("calibration_models")
    exclusive_timing: bool = _default("exclusive_timing")   # slots time one at a time
    turns: bool = _default("turns")     # image changes in turns (matrixbench.executors.turns); on by default
    turns_cores: int = _default("turns_cores")   # with turns: the pair's blocks pinned to this many cores (0: not);
    # "auto" (the default) is resolved here once: 1 with turns, 0 without (__post_init__), never seen downstream
    gpu_types: Tuple[str, ...] = _default("gpu_types")   # () = no GPU-type axis (matrixbench.run.pending)
    # matrix.yaml's ``prices:`` as written (matrixbench.matrix.prices): the report's, not the run's
    prices: Dict[str, JSON] = field(default_factory=dict)
    attribution: bool = _default("attribution")   # bridge images derived (matrixbench.matrix.attribution)
    bridges: Tuple[Any, ...] = ()    # attribution.Bridge: the derived images, in ``images`` too
    refused: Tuple[Any, ...] = ()    # attribution.Refused: corners that cannot exist, with the reason
    build: BuildSettings = BuildSettings()   # how images are built (`build`, run --backend auto, Ray nodes)
    path: Optional[Path] = None

    def __post_init__(self) -> None:
        if cast(object, self.turns_cores) == AUTO_TURNS_CORES:   # the declared default, before it is resolved
            object.__setattr__(self, "turns_cores", PINNED_CORES if self.turns else 0)

    def to_dict(self) -> JSON:
        """Plain data (for run.json and hashing); ``path`` left out."""
        data = dataclasses.asdict(self)
        del data["path"]
        data["models"] = {name: _given(model) for name, model in data["models"].items()}
        if not data["tf32"]:
            del data["tf32"]        # off, a matrix is (and hashes) as before the tf32 axis existed
        if not data["turns"]:
            del data["turns"]       # off, a matrix is (and hashes) as before turns existed
        if not data["turns_cores"]:
            del data["turns_cores"]   # not pinned: likewise
        if not data["gpu_types"]:
            del data["gpu_types"]   # without the axis, a matrix is (and hashes) as before it existed
        if not data["prices"]:
            del data["prices"]
        if not data["attribution"]:
            del data["attribution"], data["bridges"], data["refused"]   # likewise without attribution
        if not self.build.given():
            del data["build"]   # run.json writes it redacted (matrixbench.run.manifest)
        return data

    def content_hash(self) -> str:
        """The hash of what is measured: prices (the report's) and the build settings (a mirror) left out."""
        data = self.to_dict()
        data.pop("prices", None)
        data.pop("build", None)
        return _short_hash(data)


@dataclass(frozen=True)
class Overrides:
    """CLI overrides; None leaves the matrix's value. The settings ones (every field but
    images and models) are those runner.settings declares with a flag."""

    images: Optional[Sequence[str]] = None
    models: Optional[Sequence[str]] = None
    batch_sizes: Optional[Sequence[int]] = None
    modes: Optional[Sequence[str]] = None
    dtypes: Optional[Sequence[str]] = None
    repeats: Optional[Union[str, int]] = None
    repeats_min: Optional[int] = None
    repeats_max: Optional[int] = None
    margin_pct: Optional[float] = None
    iterations: Optional[int] = None
    warmup: Optional[int] = None
    timeout_s: Optional[float] = None
    size: Optional[str] = None
    weights: Optional[str] = None
    attention: Optional[str] = None
    tf32: Optional[bool] = None
    slots: Optional[Union[str, int]] = None
    calibrate: Optional[bool] = None
    calibration_models: Optional[Sequence[str]] = None
    exclusive_timing: Optional[bool] = None
    paired: Optional[bool] = None
    min_time_s: Optional[Union[str, float]] = None
    target_stdrel: Optional[float] = None
    max_time_s: Optional[float] = None
    gpu_types: Optional[Sequence[str]] = None
    sets: Mapping[str, Any] = field(default_factory=dict)   # --set KEY=VALUE: any matrix setting
    attribution: Optional[bool] = None
    build: Mapping[str, Any] = field(default_factory=dict)   # `matrixbench build`'s flags (settings.BUILD_FLAGS)

    def settings(self) -> JSON:
        """The settings given, by matrix key (lists without repeats); a flag wins over --set."""
        flagged = {s.name: getattr(self, s.name) for s in OVERRIDES if getattr(self, s.name) is not None}
        given = {**self.sets, **self.build, **flagged}
        return {name: _unique(value) if isinstance(value, (list, tuple)) else value
                for name, value in given.items()}


def _short_hash(data: Any) -> str:
    text = json.dumps(data, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


# --- loading -------------------------------------------------------------------------------

def load_matrix(path: Path | str, overrides: Optional[Overrides] = None,
                metadata: Optional[attribution.MetadataSource] = None) -> Matrix:
    """Read a matrix file, apply ``overrides``, validate the result once, resolve it; with
    ``attribution``, add the bridge images (``metadata``: transformers' wheel metadata, by default
    from the wheelhouse).

    Raises MatrixError naming what is wrong: ``file:line:col`` for the file, the flag for an
    override.
    """
    path = Path(path)
    overrides = overrides or Overrides()
    text = matrix_yaml.read_text(path)
    data = matrix_yaml.parse(text, path)
    given = overrides.settings()
    if isinstance(data, dict):
        data = {**data, **given}
    flags = {name: _flag_of(name, overrides) for name in given}
    _check_finite(data, path, flags)
    matrix_errors.validate(data, MATRIX_SCHEMA, text, path, flags=flags)
    _check_repeats_range(data, text, path, flags)
    _check_index_urls(data, path, flags)
    _check_name_lengths(data, path, flags)
    matrix = _build(data, path, weights=overrides.weights)
    matrix = _select_entries(matrix, overrides)
    _check_tiny(matrix, overrides)   # of the models --models selects: a local model left out runs in no size
    if matrix.attribution:
        matrix = attribution.derive(matrix, metadata or attribution.wheel_metadata)
    return check_size(matrix)


# Planning is linear (benchmarks/bench_plan_scale.py: ~123k processes in seconds); a matrix larger
# than this is a typo (batch sizes 1-4096?) and would run for months: refused by validate and run.
MAX_PROCESSES = 250_000


def process_count(matrix: Matrix) -> int:
    """The processes a run of ``matrix`` starts: cells x repeats, in every image and GPU type."""
    repeats = matrix.repeats if isinstance(matrix.repeats, int) else 1
    return (len(matrix.images) * max(len(matrix.gpu_types), 1) * len(matrix.models) * len(matrix.dtypes)
            * len(matrix.batch_sizes) * len(matrix.modes) * repeats)


def check_size(matrix: Matrix) -> Matrix:
    """The matrix, or MatrixError when it has more than MAX_PROCESSES processes, saying how many."""
    count = process_count(matrix)
    if count > MAX_PROCESSES:
        raise MatrixError(
            f"{matrix.path}: {count:,} processes ({len(matrix.images)} image(s) x {len(matrix.models)} model(s) x "
            f"{len(matrix.dtypes)} dtype(s) x {len(matrix.batch_sizes)} batch size(s) x {len(matrix.modes)} mode(s)"
            f" x {matrix.repeats} repeat(s){_gpu_type_factor(matrix)}), over the limit of {MAX_PROCESSES:,}: "
            "fewer batch sizes, models or repeats (or split it into several runs with --images/--models)")
    return matrix


def _gpu_type_factor(matrix: Matrix) -> str:
    return f" x {len(matrix.gpu_types)} GPU type(s)" if matrix.gpu_types else ""


def _check_finite(data: Any, path: Path, flags: Mapping[str, str], where: Tuple[Any, ...] = ()) -> None:
    """No number of a matrix may be NaN or infinite (JSON Schema lets them through every bound):
    MatrixError naming the key, or the flag it came from."""
    if isinstance(data, float) and not math.isfinite(data):
        name = flags.get(where[0]) if where else None
        key = matrix_errors.dotted(where)  # type: ignore[no-untyped-call]
        raise MatrixError(f"{name or f'{path}: {key}'} must be a finite number, got {data}")
    children = data.items() if isinstance(data, dict) else enumerate(data) if isinstance(data, list) else ()
    for key, value in children:
        _check_finite(value, path, flags, (*where, key))


def _flag_of(name: str, overrides: Overrides) -> str:
    """How the user gave the setting ``name``: its flag, or ``--set name`` (the flag wins when both)."""
    flag = BY_NAME[name].flag
    if name in overrides.build:
        return flag or name
    if name in overrides.sets and not (flag and getattr(overrides, name, None) is not None):
        return f"--set {name}"
    return flag or name


def _build(data: JSON, path: Path, weights: Optional[str] = None) -> Matrix:
    """The Matrix of validated data; ``weights`` (--weights) replaces every model's."""
    values = {**DEFAULTS, **data}
    default_weights = values.pop("weights")
    models = values.pop("models")
    return Matrix(
        images={name: _image(name, entry) for name, entry in values.pop("images").items()},
        models={name: _model(name, dict(entry, **({"weights": weights} if weights else {})), default_weights, path,
                             weights_flag=weights is not None) for name, entry in models.items()},
        batch_sizes=tuple(int(size) for size in values.pop("batch_sizes")),
        modes=tuple(values.pop("modes")),
        dtypes=tuple(values.pop("dtypes")),
        calibration_models=tuple(values.pop("calibration_models")),
        gpu_types=_gpu_types(values.pop("gpu_types")),
        build=_build_settings({s.name: values.pop(s.name) for s in BUILD_SETTINGS}, path),
        path=path,
        **values,
    )


def _check_repeats_range(data: JSON, text: str, path: Path, flags: Mapping[str, str]) -> None:
    """repeats_min <= repeats_max (JSON Schema bounds each alone): MatrixError naming repeats_max where it was
    given (its line, or its flag), else repeats_min, and the fix."""
    low, high = ({**DEFAULTS, **data}[name] for name in ("repeats_min", "repeats_max"))
    if low <= high:
        return
    key = "repeats_max" if "repeats_max" in data else "repeats_min"
    where = matrix_errors.where_key(text, path, key, flags)  # type: ignore[no-untyped-call]
    raise MatrixError(f"{where} {data[key]} leaves repeats_min {low} > repeats_max {high}: with repeats auto a "
                      f"cell starts with repeats_min processes and gets at most repeats_max; raise repeats_max to "
                      f"{low} or more, or lower repeats_min to {high} or less")


def _check_name_lengths(data: JSON, path: Path, flags: Mapping[str, str]) -> None:
    """Image, model and GPU type names of at most MAX_NAME characters (each names a folder of every run or
    starts its records' file names): MatrixError naming each longer one with a shorter name to use instead,
    one that no other name of its kind has (nor another's suggestion: two long names alike get two)."""
    problems = []
    for key in ("images", "models", "gpu_types"):
        names = list(data.get(key) or ())
        taken = set(names)
        for name in names:
            if len(name) > MAX_NAME:
                where = flags.get(key) or f"{path}: {key}"
                problem = f"{where}: {name[:40]}... is a name of {len(name)} characters; use at most {MAX_NAME}"
                if key == "gpu_types":   # Ray's name of a GPU type (A100, H100), not one to choose
                    problems.append(problem)
                    continue
                suggested = shorter_name(name, MAX_NAME, taken)
                taken.add(suggested)
                problems.append(f"{problem}, e.g. {suggested}")
    if problems:
        suggested_any = any(", e.g. " in problem for problem in problems)
        raise MatrixError("; ".join(problems) + " (each names a folder of the run, or starts its records' file "
                          "names" + ("; no other name of the matrix is the one suggested)" if suggested_any else ")"))


def _check_index_urls(data: JSON, path: Path, flags: Mapping[str, str]) -> None:
    """The build scope's index URLs are http(s) URLs: MatrixError naming the key (or its flag), credentials hidden."""
    for key in ("index_url", "extra_index_urls"):
        value = data.get(key) if isinstance(data, dict) else None
        urls = value if isinstance(value, list) else [value]
        bad = [url for url in urls if isinstance(url, str) and url and not re.match(r"^https?://", url)]
        if bad:
            raise MatrixError(f"{flags.get(key) or f'{path}: {key}'}: {redact_urls(bad[0])!r} is not an http(s) URL; "
                              "give one such as https://mirror.example/simple")


def _build_settings(values: JSON, path: Path) -> BuildSettings:
    """The build scope; a relative CA bundle is the matrix file's."""
    ca_bundle = values["ca_bundle"] and str(path.parent / values["ca_bundle"])
    return BuildSettings(**{**values, "extra_index_urls": tuple(values["extra_index_urls"]), "ca_bundle": ca_bundle})


GPU_TYPE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"


def _gpu_types(names: Sequence[str]) -> Tuple[str, ...]:
    """The GPU-type axis; each name is a folder of the run (results/<run>/<gpu_type>/)."""
    bad = [name for name in names if not re.match(GPU_TYPE_PATTERN, name)]
    if bad:
        raise MatrixError(f"gpu_types: {', '.join(map(repr, bad))}: a GPU type is a name as Ray gives it "
                          "(A100, V100, T4, H100, A10G, ...): letters, digits, '.', '_' and '-'")
    return tuple(names)


def default_base_image(python: str) -> str:
    """What an image entry builds on unless it names a base_image: the official Python image."""
    return f"python:{python}-slim-bookworm"


def _image(name: str, entry: JSON) -> Image:
    return Image(
        name=name,
        torch=entry["torch"],
        python=entry["python"],
        transformers=entry["transformers"],
        base_image=entry.get("base_image") or default_base_image(entry["python"]),
        index_url=entry.get("index_url"),
        extra_index_urls=tuple(entry.get("extra_index_urls", ())),
        extra_pins=tuple(entry.get("extra_pins", ())),
        env=dict(entry.get("env", {})),
        description=entry.get("description", ""),
        published=entry.get("published"),
    )


def _model(name: str, entry: JSON, default_weights: str, matrix_path: Path, weights_flag: bool = False) -> Model:
    """A model by hub id, by ``config`` (a config.json), or by ``path`` (a save_pretrained
    folder: its config.json, and its weights unless the entry says ``weights: random``); ``weights_flag``: its
    weights are --weights'."""
    config, weights = entry.get("config"), entry.get("weights", default_weights)
    if config is not None:
        config = str(_existing_config(name, config, matrix_path))
    if entry.get("path") is not None:
        config = str(_checkpoint_config(name, entry["path"], matrix_path))
        weights = entry.get("weights", "pretrained")
    if config is not None and weights == "pretrained":
        key = "path" if entry.get("path") is not None else "config"
        missing = missing_weights(str(Path(config).parent), "give --weights random" if weights_flag
                                  else f"set weights: random on models.{name}")
        if missing:
            raise MatrixError(f"{matrix_path}: models.{name}.{key}: {missing}")
    _check_shipped_task(name, entry, matrix_path)
    _check_revision(name, entry, weights, matrix_path)
    return Model(name=name, task=entry["task"], weights=weights, model_id=entry.get("id"),
                 config_path=config, model_hash=_model_hash(name, entry, config, weights, matrix_path),
                 revision=entry.get("revision"))


def _check_revision(name: str, entry: JSON, weights: str, matrix_path: Path) -> None:
    """A revision pins hub files: refused where no hub file is read (a local model; a shipped model's random
    weights, built from its shipped config), so a record never names a revision it was not measured from."""
    if entry.get("revision") is None:
        return
    if entry.get("id") is None:
        key = "path" if entry.get("path") is not None else "config"
        raise MatrixError(f"{matrix_path}: models.{name}.revision: a hub revision, but this model is a local {key} "
                          "(its files' hash says what it is); drop revision, or give the hub model by `id:`")
    if weights == "random" and shipped_spec(name, entry.get("id"), None) is not None:
        raise MatrixError(f"{matrix_path}: models.{name}.revision: the shipped {name} with random weights is built "
                          "from its shipped config (runner/configs), no hub file is read; drop revision, or set "
                          f"weights: pretrained on models.{name}")


def _model_hash(name: str, entry: JSON, config: Optional[str], weights: str, matrix_path: Path) -> Optional[str]:
    """The local model's files' hash (runner.registry.local_model_hash), None for a hub or shipped model."""
    if config is None:
        return None
    key = "path" if entry.get("path") is not None else "config"
    try:
        return local_model_hash(config, weights, model_hash_cache())
    except OSError as exc:
        raise MatrixError(f"{matrix_path}: models.{name}.{key}: cannot read {exc.filename or config}: "
                          f"{exc.strerror or exc}") from None


def _check_shipped_task(name: str, entry: JSON, matrix_path: Path) -> None:
    """A shipped model (by its name and hub id) has one task; another fails every cell. A shipped model's name is
    that model's: the report labels rows by name (vit: "Image Classification/ViT") and compares the shipped models
    with the published tables, so another model under it would pass for the shipped one."""
    _check_shipped_name(name, entry, matrix_path)
    spec = shipped_spec(name, entry.get("id"), entry.get("config") or entry.get("path"))
    if spec is not None and entry["task"] != spec.task:
        raise MatrixError(
            f"{matrix_path}: models.{name}.task: {entry['task']!r} does not fit the shipped model "
            f"{name} ({spec.model_id}), whose task is {spec.task!r}")


def _check_shipped_name(name: str, entry: JSON, matrix_path: Path) -> None:
    shipped = SEED_MODELS.get(name)
    if shipped is None or shipped_spec(name, entry.get("id"), entry.get("config") or entry.get("path")) is not None:
        return
    key = next(key for key in ("id", "config", "path") if entry.get(key) is not None)
    raise MatrixError(
        f"{matrix_path}: models.{name}: {name!r} is the shipped model {shipped.model_id}'s name, but this entry gives "
        f"{key} {entry[key]}; the report would label it and compare it with the published tables as that model. "
        f"Name it otherwise (e.g. my-{name}), or drop {key} to run the shipped {name}")


def _checkpoint_config(name: str, folder: str, matrix_path: Path) -> Path:
    resolved = (matrix_path.parent / folder).resolve()
    if resolved.is_file():
        raise MatrixError(
            f"{matrix_path}: models.{name}.path: {folder} is a file; `path` takes the save_pretrained folder (here "
            f"{Path(folder).parent.as_posix()}), and a config.json alone is `config: {folder}`")
    if not (resolved / "config.json").is_file():
        raise MatrixError(
            f"{matrix_path}: models.{name}.path: {folder} is not a save_pretrained folder (looked for "
            f"{resolved / 'config.json'}; paths are relative to the matrix file)")
    _check_config_json(f"{matrix_path}: models.{name}.path", resolved / "config.json")
    return resolved / "config.json"


def _existing_config(name: str, config: str, matrix_path: Path) -> Path:
    given = matrix_path.parent / config
    try:
        resolved = given.resolve()
        mode = os.stat(resolved).st_mode
    except (OSError, RuntimeError):
        dangling = (f"is a symlink to {os.readlink(given)}, which does not exist" if given.is_symlink()
                    else "not found")
        raise MatrixError(f"{matrix_path}: models.{name}.config: {config} {dangling} "
                          f"(looked for {given}; paths are relative to the matrix file)") from None
    if not stat.S_ISREG(mode):
        raise MatrixError(f"{matrix_path}: models.{name}.config: {config} is {describe_kind(mode)}, not a "
                          "config.json file; give the path of a transformers config.json")
    _check_config_json(f"{matrix_path}: models.{name}.config", resolved)
    return resolved


MAX_CONFIG_BYTES = 16 * 1024 * 1024   # a transformers config.json is a few KB


def _check_config_json(where: str, path: Path) -> None:
    """What the host can check of a transformers config.json: JSON, an object, a model_type."""
    try:
        data = json.loads(read_bounded_text(path, MAX_CONFIG_BYTES))
    except (UnicodeDecodeError, OSError) as exc:
        raise MatrixError(f"{where}: cannot read {path}: {exc}") from None
    except RecursionError:
        raise MatrixError(f"{where}: {path} is nested too deeply to be a config.json") from None
    except json.JSONDecodeError as exc:
        raise MatrixError(f"{where}: {path} is not valid JSON (line {exc.lineno}, column {exc.colno}: "
                          f"{exc.msg})") from None
    if not isinstance(data, dict) or not isinstance(data.get("model_type"), str):
        raise MatrixError(f"{where}: {path} names no model_type (e.g. \"model_type\": \"vit\"); a "
                          "transformers config.json needs one, as save_pretrained writes it")


# --- overrides -----------------------------------------------------------------------------

def _select_entries(matrix: Matrix, overrides: Overrides) -> Matrix:
    """``--images`` / ``--models``: only those entries, in that order."""
    changes: JSON = {}
    if overrides.images is not None:
        changes["images"] = _select("--images", overrides.images, matrix.images)
    if overrides.models is not None:
        changes["models"] = _select("--models", overrides.models, matrix.models)
    return dataclasses.replace(matrix, **changes) if changes else matrix


def _select(flag: str, names: Sequence[str], available: Mapping[str, Any]) -> Dict[str, Any]:
    names = _unique(names)
    if not names:
        raise MatrixError(f"{flag} is empty; valid: {', '.join(available)}")
    unknown = [name for name in names if name not in available]
    if unknown:
        raise MatrixError(
            f"{flag}: unknown name(s) {', '.join(unknown)}; valid: {', '.join(available)}"
        )
    return {name: available[name] for name in names}


def _check_tiny(matrix: Matrix, overrides: Overrides) -> None:
    """The tiny variants exist only for the shipped models, and only with random weights."""
    if matrix.size != "tiny":
        return
    size = "--size tiny" if overrides.size == "tiny" else "size: tiny"
    for model in matrix.models.values():
        if model.config_path is not None:
            raise MatrixError(
                f"models.{model.name}: {size} cannot be combined with a model given by `config` or `path`: "
                "tiny variants exist only for the shipped models; use size full (or leave it out with --models)")
        if model.weights == "pretrained":
            given = "--weights pretrained" if overrides.weights == "pretrained" else (
                f"weights: pretrained (models.{model.name})")
            raise MatrixError(
                f"{given} cannot be combined with {size}: the tiny variants exist only with random "
                "weights; drop one of them (or set --weights random)")


def _unique(values: Sequence[Any]) -> List[Any]:
    return list(dict.fromkeys(values))


# --- cells ---------------------------------------------------------------------------------

def expand_cells(matrix: Matrix) -> List[Cell]:
    """The cells every image runs: model x dtype x batch size x mode (runner.axes.cross_product)."""
    return axes.cross_product([_model_axes(model) for model in matrix.models.values()], _axis_values(matrix))


def cells_by_image(matrix: Matrix) -> Dict[str, List[Cell]]:
    """image name -> that image's cells (every image runs the same cells)."""
    return {name: expand_cells(matrix) for name in matrix.images}


def make_cell(matrix: Matrix, model: Model, dtype: str, batch_size: int, mode: str) -> Cell:
    """One cell of ``model`` in the matrix's matrix-wide axes (size, fullgraph, attention, ...)."""
    single = {axis.name: value for axis in axes.AXES if not axis.many and axis.source != "models"
              for value in [_axis_values(matrix)[axis.source]]}
    return axes.make_cell({**single, **_model_axes(model), "dtype": dtype, "batch_size": batch_size, "mode": mode})


def _model_axes(model: Model) -> JSON:
    return {"model": model.name, "model_id": model.model_id, "config_path": model.config_path, "task": model.task,
            "weights": model.weights, "model_hash": model.model_hash, "revision": model.revision}


def _axis_values(matrix: Matrix) -> JSON:
    """The matrix's value (or list) of every axis not given by the model entry, by its key."""
    return {axis.source: getattr(matrix, axis.source) for axis in axes.AXES if axis.source != "models"}


def runner_settings(matrix: Matrix, device: str) -> JSON:
    """The ``settings`` block of the runner's cells file: every runner setting."""
    return {s.name: device if s.name == "device" else getattr(matrix, s.name) for s in RUNNER_SETTINGS}
