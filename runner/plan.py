"""What to run: the cells and the settings they share, read from a cells JSON file.

The file's shape (the host writes it; ``python -m runner --cells FILE`` reads it)::

    {"settings": {"iterations": 300, "warmup": 10, "timeout_s": 900, "device": "auto",
                  "accuracy_tolerance": null, "cv_threshold": 0.1},
     "image_name": "stable", "image_id": "sha256:...",
     "cells": [{"model": "vit", "task": "image-classification", ...}, ...]}

Validation is minimal and stdlib-only: required keys, types and allowed values, with an
error that names the field. Stdlib only: the parent process never imports torch.
"""
import json
from dataclasses import dataclass
from pathlib import Path

from runner.schema import CELL_SCHEMA, DTYPES, MODES, SIZES, TASKS, WEIGHTS

DEVICES = ("auto", "cuda", "cpu")
FAULTS = (None, "oom", "error", "crash", "hang")

DEFAULT_SETTINGS = {
    "iterations": 300,
    "warmup": 10,
    "timeout_s": 900,
    "device": "auto",
    "accuracy_tolerance": None,   # None: the dtype's default, see runner.tolerance
    "cv_threshold": 0.1,
}

# Optional cell keys and the value they take when left out.
CELL_DEFAULTS = {"model_id": None, "config_path": None, "fault": None}


class PlanError(ValueError):
    """A cells file or cell that cannot be run; the message names the field."""


@dataclass
class Plan:
    settings: dict
    cells: list
    image_name: object = None
    image_id: object = None
    source: str = "<argv>"


def load_plan(path):
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise PlanError(f"--cells {path}: cannot read it ({exc.strerror})") from exc
    except ValueError as exc:
        raise PlanError(f"--cells {path}: not valid JSON ({exc})") from exc
    return plan_from_dict(data, source=str(path))


def plan_from_dict(data, source="<dict>"):
    if not isinstance(data, dict):
        raise PlanError(f"{source}: expected a JSON object with 'settings' and 'cells'")
    unknown = sorted(set(data) - {"settings", "cells", "image_name", "image_id"})
    if unknown:
        raise PlanError(f"{source}: unknown top-level keys {unknown}; expected "
                        "'settings', 'cells', 'image_name', 'image_id'")
    cells = data.get("cells")
    if not isinstance(cells, list) or not cells:
        raise PlanError(f"{source}: 'cells' must be a non-empty list of cell objects")
    return Plan(
        settings=validate_settings(data.get("settings") or {}, source),
        cells=[validate_cell(cell, f"{source}: cells[{i}]") for i, cell in enumerate(cells)],
        image_name=_optional_str(data, "image_name", source),
        image_id=_optional_str(data, "image_id", source),
        source=source,
    )


def validate_settings(settings, where="settings"):
    if not isinstance(settings, dict):
        raise PlanError(f"{where}: 'settings' must be an object")
    unknown = sorted(set(settings) - set(DEFAULT_SETTINGS))
    if unknown:
        raise PlanError(f"{where}: unknown settings {unknown}; valid: {sorted(DEFAULT_SETTINGS)}")
    merged = dict(DEFAULT_SETTINGS, **settings)
    _check_int(merged, "iterations", 1, f"{where}: settings")
    _check_int(merged, "warmup", 0, f"{where}: settings")
    _check_positive(merged, "timeout_s", f"{where}: settings")
    _check_positive(merged, "cv_threshold", f"{where}: settings")
    if merged["accuracy_tolerance"] is not None:
        _check_positive(merged, "accuracy_tolerance", f"{where}: settings")
    _check_choice(merged, "device", DEVICES, f"{where}: settings")
    return merged


def validate_cell(cell, where="cell"):
    if not isinstance(cell, dict):
        raise PlanError(f"{where}: a cell must be an object, got {type(cell).__name__}")
    known = set(CELL_SCHEMA["properties"])
    unknown = sorted(set(cell) - known)
    if unknown:
        raise PlanError(f"{where}: unknown keys {unknown}; valid: {sorted(known)}")
    missing = [key for key in CELL_SCHEMA["required"] if key not in cell]
    if missing:
        raise PlanError(f"{where}: missing required keys {missing}")
    cell = dict(CELL_DEFAULTS, **cell)
    _check_fields(cell, where)
    return cell


def _check_fields(cell, where):
    if not isinstance(cell["model"], str) or not cell["model"]:
        raise PlanError(f"{where}: 'model' must be a non-empty string")
    for key, choices in (("task", TASKS), ("weights", WEIGHTS), ("size", SIZES),
                         ("mode", MODES), ("dtype", DTYPES), ("fault", FAULTS)):
        _check_choice(cell, key, choices, where)
    _check_int(cell, "batch_size", 1, where)
    if not isinstance(cell["fullgraph"], bool):
        raise PlanError(f"{where}: 'fullgraph' must be true or false, got {cell['fullgraph']!r}")
    for key in ("model_id", "config_path"):
        _optional_str(cell, key, where)


def _check_choice(obj, key, choices, where):
    if obj[key] not in choices:
        raise PlanError(f"{where}: '{key}' must be one of {list(choices)}, got {obj[key]!r}")


def _check_int(obj, key, minimum, where):
    value = obj[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise PlanError(f"{where}: '{key}' must be an integer >= {minimum}, got {value!r}")


def _check_positive(obj, key, where):
    value = obj[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise PlanError(f"{where}: '{key}' must be a number > 0, got {value!r}")


def _optional_str(obj, key, where):
    value = obj.get(key)
    if value is not None and not isinstance(value, str):
        raise PlanError(f"{where}: '{key}' must be a string or null, got {value!r}")
    return value
