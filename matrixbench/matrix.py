"""matrix.yaml: load and validate it, apply CLI overrides, expand it into runner cells.

``load_matrix(path)`` returns a ``Matrix``; ``apply_overrides(matrix, Overrides(...))`` narrows
or changes it; ``cells_by_image(matrix)`` gives each image's runner cell dicts
(runner/schema.py CELL_SCHEMA). Every problem raises ``MatrixError`` naming the field path or
the flag, and the allowed values.
"""
import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

from matrixbench import matrix_errors, matrix_yaml
from matrixbench.errors import MatrixError
from matrixbench.matrix_schema import DEFAULTS, MATRIX_SCHEMA, NUMBER_BOUNDS
from runner.schema import DTYPES, MODES, SIZES, WEIGHTS


@dataclass(frozen=True)
class Image:
    """A named environment: one Docker image with its own torch."""

    name: str
    torch: str
    python: str
    transformers: str
    base_image: str
    index_url: Optional[str] = None
    extra_index_urls: tuple = ()
    extra_pins: tuple = ()
    env: dict = field(default_factory=dict)
    description: str = ""
    published: Optional[str] = None   # the report's published source; None: by torch version

    @property
    def torch_version(self):
        """The pinned version ("2.0.1" for "torch==2.0.1"), or None when not pinned exactly."""
        spec = self.torch.replace(" ", "")
        return spec[len("torch=="):] if spec.startswith("torch==") and "," not in spec else None

    def requirements(self):
        """What pip installs into the image: torch, transformers, then the extra pins."""
        return [self.torch, self.transformers, *self.extra_pins]

    def content_hash(self):
        """Short hash of everything that goes into building this image (for image labels)."""
        build = dataclasses.asdict(self)
        del build["name"], build["description"], build["published"]
        return _short_hash(build)


@dataclass(frozen=True)
class Model:
    name: str
    task: str
    weights: str
    model_id: Optional[str] = None
    config_path: Optional[str] = None


@dataclass(frozen=True)
class Matrix:
    images: dict
    models: dict
    batch_sizes: tuple
    modes: tuple
    dtypes: tuple = ("float32",)
    size: str = "full"
    fullgraph: bool = False
    iterations: int = 300
    warmup: int = 10
    timeout_s: float = 900
    accuracy_tolerance: Optional[float] = None  # None: the dtype's default (runner.accuracy)
    cv_threshold: float = 0.1
    path: Optional[Path] = None

    def to_dict(self):
        """Plain data (for run.json and hashing); ``path`` left out."""
        data = dataclasses.asdict(self)
        del data["path"]
        return data

    def content_hash(self):
        return _short_hash(self.to_dict())


@dataclass(frozen=True)
class Overrides:
    """CLI overrides; None leaves the matrix's value."""

    images: Optional[Sequence[str]] = None
    models: Optional[Sequence[str]] = None
    batch_sizes: Optional[Sequence[int]] = None
    modes: Optional[Sequence[str]] = None
    dtypes: Optional[Sequence[str]] = None
    iterations: Optional[int] = None
    warmup: Optional[int] = None
    timeout_s: Optional[float] = None
    size: Optional[str] = None
    weights: Optional[str] = None


def _short_hash(data):
    text = json.dumps(data, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


# --- loading -------------------------------------------------------------------------------

def load_matrix(path):
    """Read, validate and resolve a matrix file; raise MatrixError naming what is wrong."""
    path = Path(path)
    text = matrix_yaml.read_text(path)
    data = matrix_yaml.parse(text, path)
    matrix_errors.validate(data, MATRIX_SCHEMA, text, path)
    return _build(data, path)


def _build(data, path):
    values = {**DEFAULTS, **data}
    weights = values.pop("weights")
    return Matrix(
        images={name: _image(name, entry) for name, entry in values.pop("images").items()},
        models={name: _model(name, entry, weights, path) for name, entry in values.pop("models").items()},
        batch_sizes=tuple(int(size) for size in values.pop("batch_sizes")),
        modes=tuple(values.pop("modes")),
        dtypes=tuple(values.pop("dtypes")),
        path=path,
        **values,
    )


def _image(name, entry):
    return Image(
        name=name,
        torch=entry["torch"],
        python=entry["python"],
        transformers=entry["transformers"],
        base_image=entry.get("base_image") or f"python:{entry['python']}-slim-bookworm",
        index_url=entry.get("index_url"),
        extra_index_urls=tuple(entry.get("extra_index_urls", ())),
        extra_pins=tuple(entry.get("extra_pins", ())),
        env=dict(entry.get("env", {})),
        description=entry.get("description", ""),
        published=entry.get("published"),
    )


def _model(name, entry, default_weights, matrix_path):
    """A model by hub id, by ``config`` (a config.json), or by ``path`` (a save_pretrained
    folder: its config.json, and its weights unless the entry says ``weights: random``)."""
    config, weights = entry.get("config"), entry.get("weights", default_weights)
    if config is not None:
        config = str(_existing_config(name, config, matrix_path))
    if entry.get("path") is not None:
        config = str(_checkpoint_config(name, entry["path"], matrix_path))
        weights = entry.get("weights", "pretrained")
    return Model(name=name, task=entry["task"], weights=weights, model_id=entry.get("id"),
                 config_path=config)


def _checkpoint_config(name, folder, matrix_path):
    resolved = (matrix_path.parent / folder).resolve()
    if not (resolved / "config.json").is_file():
        raise MatrixError(
            f"{matrix_path}: models.{name}.path: {folder} is not a save_pretrained folder (looked for "
            f"{resolved / 'config.json'}; paths are relative to the matrix file)")
    _check_config_json(f"{matrix_path}: models.{name}.path", resolved / "config.json")
    return resolved / "config.json"


def _existing_config(name, config, matrix_path):
    resolved = (matrix_path.parent / config).resolve()
    if not resolved.is_file():
        raise MatrixError(
            f"{matrix_path}: models.{name}.config: {config} not found "
            f"(looked for {resolved}; paths are relative to the matrix file)"
        )
    _check_config_json(f"{matrix_path}: models.{name}.config", resolved)
    return resolved


def _check_config_json(where, path):
    """What the host can check of a transformers config.json: JSON, an object, a model_type."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, OSError) as exc:
        raise MatrixError(f"{where}: cannot read {path}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise MatrixError(f"{where}: {path} is not valid JSON (line {exc.lineno}, column {exc.colno}: "
                          f"{exc.msg})") from None
    if not isinstance(data, dict) or not isinstance(data.get("model_type"), str):
        raise MatrixError(f"{where}: {path} names no model_type (e.g. \"model_type\": \"vit\"); a "
                          "transformers config.json needs one, as save_pretrained writes it")


# --- overrides -----------------------------------------------------------------------------

def apply_overrides(matrix, overrides):
    """Return ``matrix`` narrowed or changed by ``overrides``; unknown names are errors."""
    changes = {}
    if overrides.images is not None:
        changes["images"] = _select("--images", overrides.images, matrix.images)
    if overrides.models is not None:
        changes["models"] = _select("--models", overrides.models, matrix.models)
    if overrides.weights is not None:
        _check_choice("--weights", overrides.weights, WEIGHTS)
        models = changes.get("models", matrix.models)
        changes["models"] = {n: dataclasses.replace(m, weights=overrides.weights) for n, m in models.items()}
    for flag, name, choices in (("--modes", "modes", MODES), ("--dtypes", "dtypes", DTYPES)):
        values = getattr(overrides, name)
        if values is not None:
            changes[name] = tuple(_check_choices(flag, values, choices))
    if overrides.batch_sizes is not None:
        changes["batch_sizes"] = tuple(_check_batch_sizes(overrides.batch_sizes))
    if overrides.size is not None:
        changes["size"] = _check_choice("--size", overrides.size, SIZES)
    changes.update(_numbers(overrides))
    result = dataclasses.replace(matrix, **changes)
    _check_tiny(result, overrides)
    return result


def _select(flag, names, available):
    names = _unique(names)
    if not names:
        raise MatrixError(f"{flag} is empty; valid: {', '.join(available)}")
    unknown = [name for name in names if name not in available]
    if unknown:
        raise MatrixError(
            f"{flag}: unknown name(s) {', '.join(unknown)}; valid: {', '.join(available)}"
        )
    return {name: available[name] for name in names}


def _check_choices(flag, values, choices):
    values = _unique(values)
    if not values:
        raise MatrixError(f"{flag} is empty; valid: {', '.join(choices)}")
    for value in values:
        _check_choice(flag, value, choices)
    return values


def _check_choice(flag, value, choices):
    if value not in choices:
        raise MatrixError(f"{flag}: {value!r} is not one of {', '.join(choices)}")
    return value


def _check_batch_sizes(sizes):
    sizes = _unique(sizes)
    if not sizes or any(not isinstance(s, int) or isinstance(s, bool) or s < 1 for s in sizes):
        raise MatrixError(f"--batch-sizes must be positive integers, got {list(sizes)}")
    return sizes


def _numbers(overrides):
    changes = {}
    for name, flag in (("iterations", "--iterations"), ("warmup", "--warmup"), ("timeout_s", "--timeout")):
        value = getattr(overrides, name)
        if value is None:
            continue
        lowest, highest = NUMBER_BOUNDS[name]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < lowest:
            raise MatrixError(f"{flag} must be a number >= {lowest:g}, got {value!r}")
        if value > highest:
            raise MatrixError(f"{flag} must be <= {highest:,}, got {value!r}: more is a typo, not a measurement")
        changes[name] = value
    return changes


def _check_tiny(matrix, overrides):
    """The tiny variants exist only for the shipped models, and only with random weights."""
    if matrix.size != "tiny":
        return
    size = "--size tiny" if overrides.size == "tiny" else "size: tiny"
    for model in matrix.models.values():
        if model.config_path is not None:
            raise MatrixError(
                f"models.{model.name}: {size} cannot be combined with a model given by `config`: "
                "tiny variants exist only for the shipped models; use size full")
        if model.weights == "pretrained":
            given = "--weights pretrained" if overrides.weights == "pretrained" else (
                f"weights: pretrained (models.{model.name})")
            raise MatrixError(
                f"{given} cannot be combined with {size}: the tiny variants exist only with random "
                "weights; drop one of them (or set --weights random)")


def _unique(values):
    return list(dict.fromkeys(values))


# --- cells ---------------------------------------------------------------------------------

def expand_cells(matrix):
    """The cells every image runs, as runner cell dicts: model x dtype x batch size x mode."""
    return [
        _cell(matrix, model, dtype, batch_size, mode)
        for model in matrix.models.values()
        for dtype in matrix.dtypes
        for batch_size in matrix.batch_sizes
        for mode in matrix.modes
    ]


def cells_by_image(matrix):
    """image name -> that image's cells (every image runs the same cells)."""
    return {name: expand_cells(matrix) for name in matrix.images}


def _cell(matrix, model, dtype, batch_size, mode):
    return {
        "model": model.name,
        "model_id": model.model_id,
        "config_path": model.config_path,
        "task": model.task,
        "weights": model.weights,
        "size": matrix.size,
        "batch_size": batch_size,
        "mode": mode,
        "fullgraph": matrix.fullgraph and mode != "eager",
        "dtype": dtype,
        "fault": None,
    }


def runner_settings(matrix, device):
    """The ``settings`` block of the runner's cells file."""
    return {
        "iterations": matrix.iterations,
        "warmup": matrix.warmup,
        "timeout_s": matrix.timeout_s,
        "device": device,
        "accuracy_tolerance": matrix.accuracy_tolerance,
        "cv_threshold": matrix.cv_threshold,
    }
