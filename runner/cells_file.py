"""What to run: the cells and the settings they share, read from a cells JSON file.

The file's shape (the host writes it; ``python -m runner --cells FILE`` reads it)::

    {"settings": {"iterations": 300, "warmup": 10, "timeout_s": 900, "device": "auto",
                  "accuracy_tolerance": null, "cv_threshold": 0.1},
     "image_name": "stable", "image_id": "sha256:...",
     "cells": [{"model": "vit", "task": "image-classification", ...}, ...],
     "repeats": [[0, 0], [1, 0], [1, 1], [0, 1]], "order_seed": 1234,
     "turns": {"folder": "/turns", "role": "first", "partner": "nightly", "pair_id": "3f2a...", "cores": [15]}}

``repeats`` (optional) is the run order: [index into cells, repeat index] pairs, one process
each; without it every cell runs once, as repeat 0, in the order of ``cells``. ``order_seed``
is the seed the host shuffled the order with (recorded, not used here). ``turns`` (optional, v4):
this runner runs at the same time as another image's runner of the same cells and repeats, and each
repeat's process takes turns with the partner's (runner.turns; absent or null: no turns); its optional
``cores`` (v5) pin both sides' blocks to those CPU cores (runner.turns.pin).

Validation is minimal and stdlib-only: required keys, types and allowed values, with an
error that names the field. Stdlib only: the parent process never imports torch.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from runner import axes
from runner.baton import ROLES as BATON_ROLES
from runner.core import Cell, Repeat
from runner.schema import CELL_SCHEMA, SUPPORTED_CELLS_VERSIONS
from runner.settings import BY_NAME, DEFAULT_SETTINGS

JSON = Dict[str, Any]


class CellsFileError(ValueError):
    """A cells file or cell that cannot be run; the message names the field."""


TOP_LEVEL_KEYS = ("settings", "cells", "image_name", "image_id", "repeats", "order_seed", "turns")
TURNS_KEYS = ("folder", "role", "partner", "pair_id")
TURNS_OPTIONAL_KEYS = ("cores",)    # v5


@dataclass(frozen=True)
class Turns:
    """The pair this runner takes turns with: the folder both runners see, this side's role (runner.baton.ROLES),
    the partner image's name, and the pair launch's id (recorded in timing.turns)."""

    folder: str
    role: str
    partner: str
    pair_id: str
    cores: Tuple[int, ...] = ()     # the CPU cores both sides' blocks are pinned to; empty: not pinned

    def for_repeat(self, stem: str) -> "Turns":
        """One repeat's baton folder: ``<folder>/<repeat stem>`` (runner.core.repeat_stem)."""
        return replace(self, folder=str(Path(self.folder) / stem))


@dataclass
class CellsFile:
    """The cells, and ``repeats``: the processes to run, in order (default: each cell once)."""

    settings: JSON
    cells: List[Cell]
    image_name: Optional[str] = None
    image_id: Optional[str] = None
    repeats: List[Repeat] = field(default_factory=list)
    order_seed: Optional[int] = None
    turns: Optional[Turns] = None

    def __post_init__(self) -> None:
        self.repeats = self.repeats or [Repeat(cell) for cell in self.cells]


def schedule_pairs(repeats: Sequence[Repeat]) -> Tuple[List[Cell], List[List[int]]]:
    """Repeats in run order -> the cells file's ``cells`` (each once, first-seen order) and
    ``repeats`` ([cell index, repeat index] pairs)."""
    cells: List[Cell] = []
    for repeat in repeats:
        if repeat.cell not in cells:
            cells.append(repeat.cell)
    return cells, [[cells.index(repeat.cell), repeat.index] for repeat in repeats]


def load_cells_file(path: Union[str, Path]) -> CellsFile:
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise CellsFileError(f"--cells {path}: cannot read it ({exc.strerror})") from exc
    except ValueError as exc:
        raise CellsFileError(f"--cells {path}: not valid JSON ({exc})") from exc
    version = data.get("schema_version") if isinstance(data, dict) else None
    if version not in SUPPORTED_CELLS_VERSIONS:
        raise CellsFileError(f"--cells {path}: schema_version {version!r} is not supported; this runner reads "
                        f"versions {list(SUPPORTED_CELLS_VERSIONS)}: the host and the image differ, rebuild "
                        "the image (`matrixbench build`)")
    return cells_file_from_dict({key: value for key, value in data.items() if key != "schema_version"}, str(path))


def cells_file_from_dict(data: Any, source: str = "<dict>") -> CellsFile:
    if not isinstance(data, dict):
        raise CellsFileError(f"{source}: expected a JSON object with 'settings' and 'cells'")
    unknown = sorted(set(data) - set(TOP_LEVEL_KEYS))
    if unknown:
        raise CellsFileError(f"{source}: unknown top-level keys {unknown}; expected {list(TOP_LEVEL_KEYS)}")
    cells = data.get("cells")
    if not isinstance(cells, list) or not cells:
        raise CellsFileError(f"{source}: 'cells' must be a non-empty list of cell objects")
    checked = [validate_cell(cell, f"{source}: cells[{i}]") for i, cell in enumerate(cells)]
    seed = data.get("order_seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise CellsFileError(f"{source}: 'order_seed' must be an integer or null, got {seed!r}")
    return CellsFile(
        settings=validate_settings(data.get("settings") or {}, source),
        cells=checked,
        image_name=_optional_str(data, "image_name", source),
        image_id=_optional_str(data, "image_id", source),
        repeats=validate_repeats(data.get("repeats"), checked, source),
        order_seed=seed,
        turns=validate_turns(data.get("turns"), source),
    )


def validate_turns(turns: Any, source: str = "<dict>") -> Optional[Turns]:
    """The ``turns`` object as Turns (None when absent or null); each key a non-empty string, role one of
    runner.baton.ROLES."""
    if turns is None:
        return None
    if not isinstance(turns, dict):
        raise CellsFileError(f"{source}: 'turns' must be an object {{{', '.join(TURNS_KEYS)}}} or null, "
                             f"got {turns!r}")
    known = TURNS_KEYS + TURNS_OPTIONAL_KEYS
    unknown, missing = sorted(set(turns) - set(known)), [key for key in TURNS_KEYS if key not in turns]
    if unknown or missing:
        raise CellsFileError(f"{source}: 'turns' has unknown keys {unknown} / lacks {missing}; "
                             f"expected {list(TURNS_KEYS)} and optionally {list(TURNS_OPTIONAL_KEYS)}")
    for key in TURNS_KEYS:
        if not isinstance(turns[key], str) or not turns[key]:
            raise CellsFileError(f"{source}: 'turns.{key}' must be a non-empty string, got {turns[key]!r}")
    if turns["role"] not in BATON_ROLES:
        raise CellsFileError(f"{source}: 'turns.role' must be one of {list(BATON_ROLES)}, got {turns['role']!r}")
    cores = turns.get("cores", [])
    if (not isinstance(cores, list) or any(isinstance(core, bool) or not isinstance(core, int) or core < 0
                                           for core in cores) or len(set(cores)) != len(cores)):
        raise CellsFileError(f"{source}: 'turns.cores' must be a list of distinct CPU core numbers (integers >= 0), "
                             f"got {cores!r}")
    return Turns(**dict(turns, cores=tuple(cores)))


def validate_repeats(pairs: Any, cells: List[Cell], source: str = "<dict>") -> List[Repeat]:
    """The ``repeats`` pairs as Repeats, in order; each [cell index, repeat index] at most once."""
    if pairs is None:
        return [Repeat(cell) for cell in cells]
    if not isinstance(pairs, list) or not pairs:
        raise CellsFileError(f"{source}: 'repeats' must be a non-empty list of [cell index, repeat index] pairs")
    for i, pair in enumerate(pairs):
        if not (isinstance(pair, list) and len(pair) == 2 and all(_index(v) for v in pair)
                and pair[0] < len(cells)):
            raise CellsFileError(f"{source}: repeats[{i}] must be [cell index < {len(cells)}, repeat index >= 0], "
                            f"got {pair!r}")
    if len({tuple(pair) for pair in pairs}) != len(pairs):
        raise CellsFileError(f"{source}: 'repeats' lists a [cell index, repeat index] pair twice")
    return [Repeat(cells[cell], repeat) for cell, repeat in pairs]


def _index(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def validate_settings(settings: Any, where: str = "settings") -> JSON:
    """The runner settings with defaults filled in; each checked against its declaration."""
    if not isinstance(settings, dict):
        raise CellsFileError(f"{where}: 'settings' must be an object")
    unknown = sorted(set(settings) - set(DEFAULT_SETTINGS))
    if unknown:
        raise CellsFileError(f"{where}: unknown settings {unknown}; valid: {sorted(DEFAULT_SETTINGS)}")
    merged = dict(DEFAULT_SETTINGS, **settings)
    for name, value in merged.items():
        problem = BY_NAME[name].problem(value)
        if problem:
            raise CellsFileError(f"{where}: settings: '{name}' {problem}")
    return merged


def validate_cell(cell: Any, where: str = "cell") -> Cell:
    if not isinstance(cell, dict):
        raise CellsFileError(f"{where}: a cell must be an object, got {type(cell).__name__}")
    known = set(CELL_SCHEMA["properties"])
    unknown = sorted(set(cell) - known)
    if unknown:
        raise CellsFileError(f"{where}: unknown keys {unknown}; valid: {sorted(known)}")
    missing = [key for key in CELL_SCHEMA["required"] if key not in cell]
    if missing:
        raise CellsFileError(f"{where}: missing required keys {missing}")
    _check_fields(cell, where)
    return Cell.from_dict(cell)


def _check_fields(cell: Mapping[str, Any], where: str) -> None:
    """Each axis's value against its declaration (runner.axes)."""
    found = axes.problem(cell)
    if found:
        raise CellsFileError(f"{where}: '{found[0]}' {found[1]}")


def _optional_str(obj: Mapping[str, Any], key: str, where: str) -> Optional[str]:
    value = obj.get(key)
    if value is not None and not isinstance(value, str):
        raise CellsFileError(f"{where}: '{key}' must be a string or null, got {value!r}")
    return value
