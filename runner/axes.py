"""What a cell is, declared once: every axis of the cell space, with its role and its default.

Part of the host <-> runner contract (stdlib only). From ``AXES`` derive: the cell id
(``cell_id``), the report's row key and labels (``row_key``, ``row_words``, ``mode_label``), the
cross product of a matrix (``cross_product``), the record schema's cell properties
(``cell_schema``), the cells file's checks (``problem``), which cells compare with the published
tables (``published``), each comparison's baseline (``speedup_baseline``, ``mode_change_baseline``)
and the matrix-wide settings of the axes that declare one (``setting_help``: runner.settings).

Roles:

- ``ROW``: what a report row shares (model, size, dtype, tf32; batch size has its own column);
- ``VARIED``: what a speed-up or a mode change varies (the mode);
- ``COLUMN``: the rest of the report's column (fullgraph: "default fullgraph");
- ``CONTEXT``: carried by the cell, no part of its name (task, weights, attention, model id, config).

Baselines, decided once: a speed-up compares a compiled cell with the eager cell of the same other
axes, where the axes that only apply to compiled modes (``compiled_only``: fullgraph) take their
default; a mode change compares a compiled cell with the ``default``-mode cell of the same other
axes (fullgraph included: "max-autotune fullgraph" against "default fullgraph").

Adding an axis: one ``Axis`` here, its ``Cell`` field (runner.core) and its effect in the runner;
``omit_default`` keeps cells at its default (every record before it existed) as they were.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, TypeVar, Union

from runner.core import ATTENTION, DTYPES, MODES, SIZES, TASKS, WEIGHTS, Cell, Mode

ROW, VARIED, COLUMN, CONTEXT = "row", "varied", "column", "context"
ROLES = (ROW, VARIED, COLUMN, CONTEXT)


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Any = _Required()     # an axis every cell must give (no default)
ANY: Any = object()             # ``published``: the published tables do not fix this axis
_KINDS = {"string": "a string", "integer": "an integer", "boolean": "true or false"}

CellT = TypeVar("CellT", Cell, Dict[str, Any])


def _blank(value: Any) -> str:
    return ""


@dataclass(frozen=True)
class Axis:
    """One axis of the cell space.

    ``word``: the value as the report names it ("" at the default: left out of row keys and labels);
    ``glue``: what joins the word to the row key or mode label before it; ``id_part``: the value's part
    of the cell id (in AXES order); ``source``: the matrix key its values come from ("models": the
    model entry; a list key such as "dtypes": one cell per value; else a matrix-wide value);
    ``setting_help``: declared here, its matrix-wide setting (runner.settings, flag ``--<name>``).
    """

    name: str
    role: str
    kind: str                                   # "string", "integer" or "boolean"
    default: Any = REQUIRED
    choices: Optional[Tuple[Any, ...]] = None
    nullable: bool = False
    minimum: Optional[int] = None
    maximum: Optional[int] = None
    source: str = "models"
    word: Callable[[Any], str] = _blank
    glue: str = " "
    id_part: Callable[[Any], str] = _blank
    published: Any = ANY                        # the value the published tables ran
    compiled_only: bool = False                 # eager cells take the default (torch.compile's options)
    omit_default: bool = False                  # left out of a cell's JSON at its default
    setting_help: Optional[str] = None
    required: bool = False                      # every cell gives it (records included)

    @property
    def many(self) -> bool:
        """One cell per value of a list in the matrix (``source`` a plural key)."""
        return self.source in LIST_SOURCES

    def json_schema(self) -> Dict[str, Any]:
        if self.choices is not None:
            return {"enum": [*self.choices, *([None] if self.nullable else [])]}
        schema: Dict[str, Any] = {"type": [self.kind, "null"] if self.nullable else self.kind}
        if self.kind == "string" and not self.nullable:
            schema["minLength"] = 1
        if self.minimum is not None:
            schema["minimum"] = self.minimum
        if self.maximum is not None:
            schema["maximum"] = self.maximum
        return schema

    def problem(self, value: Any) -> Optional[str]:
        """Why ``value`` is no value of this axis ("must be ..., got ..."), or None."""
        if value is None and self.nullable:
            return None
        if self.choices is not None:
            allowed = [*self.choices, *([None] if self.nullable else [])]
            return None if value in allowed else f"must be one of {allowed}, got {value!r}"
        if self.kind == "boolean":
            return None if isinstance(value, bool) else f"must be true or false, got {value!r}"
        if self.kind == "string":
            if self.nullable:
                return None if isinstance(value, str) else f"must be a string or null, got {value!r}"
            return None if isinstance(value, str) and value else "must be a non-empty string"
        fits = isinstance(value, int) and not isinstance(value, bool)
        fits = fits and (self.minimum is None or value >= self.minimum)
        fits = fits and (self.maximum is None or value <= self.maximum)
        return None if fits else f"must be {self.describe()}, got {value!r}"

    def describe(self) -> str:
        text = _KINDS[self.kind]
        if self.minimum is not None:
            text += f" >= {self.minimum:g}"
        if self.maximum is not None:
            text += f" and <= {self.maximum:,}"
        return text


LIST_SOURCES = ("dtypes", "batch_sizes", "modes")

AXES: Tuple[Axis, ...] = (      # in the record schema's order, which is also the cell id's
    Axis("model", ROW, "string", required=True, id_part=str, word=str),
    Axis("model_id", CONTEXT, "string", default=None, nullable=True),
    Axis("config_path", CONTEXT, "string", default=None, nullable=True),
    Axis("task", CONTEXT, "string", required=True, choices=TASKS),
    Axis("weights", CONTEXT, "string", required=True, choices=WEIGHTS),
    Axis("size", ROW, "string", required=True, choices=SIZES, source="size", glue="-", published="full",
         word=lambda v: "tiny" if v == "tiny" else "", id_part=lambda v: "-tiny" if v == "tiny" else ""),
    Axis("batch_size", ROW, "integer", required=True, minimum=1, maximum=4096, source="batch_sizes",
         id_part=lambda v: f"_bs{v}"),
    Axis("mode", VARIED, "string", required=True, choices=MODES, source="modes", word=str, id_part=lambda v: f"_{v}"),
    Axis("fullgraph", COLUMN, "boolean", required=True, default=False, source="fullgraph", compiled_only=True,
         published=False,
         word=lambda v: "fullgraph" if v else "", id_part=lambda v: "_fullgraph" if v else ""),
    Axis("dtype", ROW, "string", required=True, choices=DTYPES, source="dtypes", published="float32",
         word=lambda v: "" if v == "float32" else str(v), id_part=lambda v: f"_{v}"),
    Axis("attention", CONTEXT, "string", default=None, choices=ATTENTION, nullable=True, source="attention"),
    Axis("tf32", ROW, "boolean", default=False, source="tf32", published=False, omit_default=True,
         word=lambda v: "tf32" if v else "", id_part=lambda v: "_tf32" if v else "",
         setting_help="TF32 matmuls and convolutions for float32 on GPUs that have them (float32 matmul precision "
                      "high, cuda.matmul.allow_tf32 and cudnn.allow_tf32); off: the seed's flags (precision highest, "
                      "no TF32 matmuls). The report names its rows \"tf32\"; only cells without it compare with the "
                      "published tables."),
    # What a model given by a local config or checkpoint was measured from (runner.registry.local_model_hash: its
    # config, preprocessor config and, with pretrained weights, its weight files): the runner refuses files that no
    # longer hash to it, and a resume refuses records whose hash is not the files' now (matrixbench.run.resume).
    Axis("model_hash", CONTEXT, "string", default=None, nullable=True, omit_default=True),
    # A hub model's revision (matrix.yaml ``revision:``, with ``id:``): a branch, tag or commit, passed to every
    # from_pretrained (config, preprocessor, tokenizer, weights); the record's ``model_commit`` says the commit it
    # resolved to. Absent: the hub's (or the offline cache's) main.
    Axis("revision", CONTEXT, "string", default=None, nullable=True, omit_default=True),
)
BY_NAME: Dict[str, Axis] = {axis.name: axis for axis in AXES}
# The order a matrix's lists multiply in (after the models): model x dtype x batch size x mode.
PRODUCT_ORDER = ("dtype", "batch_size", "mode")

CellLike = Union[Cell, Mapping[str, Any]]
_ID_AXES = tuple(axis for axis in AXES if axis.id_part is not _blank)      # the axes that name a cell
_ID_PARTS = tuple((axis.name, axis.id_part) for axis in _ID_AXES)


def _value(cell: CellLike, axis: Axis) -> Any:
    """An axis's value in a cell (a Cell, its dict, or a record's), its default where absent."""
    if isinstance(cell, Cell):
        return getattr(cell, axis.name)
    found = cell.get(axis.name)
    return axis.default if found is None and axis.default is not REQUIRED else found


def cell_id(cell: CellLike) -> str:
    """The stable name of a cell: its record's file stem and its key for resume."""
    if isinstance(cell, Cell):
        return "".join([part(getattr(cell, name)) for name, part in _ID_PARTS])
    return "".join([axis.id_part(_value(cell, axis)) for axis in _ID_AXES])


def words(cell: CellLike, roles: Sequence[str]) -> List[Tuple[Axis, str]]:
    """(axis, word) of the axes of ``roles`` whose value the report names (not at the default)."""
    return [(axis, axis.word(_value(cell, axis))) for axis in AXES
            if axis.role in roles and axis.word(_value(cell, axis))]


def row_key(cell: CellLike) -> str:
    """A report row: the model and the other row axes but batch size, e.g. "vit-tiny float16"."""
    return "".join((axis.glue if axis.name != "model" else "") + word for axis, word in words(cell, (ROW,)))


def row_words(cell: CellLike) -> List[str]:
    """The row axes' words past the model (a label's parenthesis: "tiny", "float16")."""
    return [word for axis, word in words(cell, (ROW,)) if axis.name != "model"]


def mode_label(cell: CellLike) -> str:
    """The report's column: the mode and the column axes' words, e.g. "default fullgraph"."""
    return "".join((axis.glue if axis.role != VARIED else "") + word for axis, word in words(cell, (VARIED, COLUMN)))


def published(cell: CellLike) -> bool:
    """Whether the published tables ran a cell like this (full size, float32, no fullgraph, ...)."""
    return all(_value(cell, axis) == axis.published for axis in AXES if axis.published is not ANY)


def cell_schema() -> Dict[str, Any]:
    """The JSON Schema of a cell (runner.schema.CELL_SCHEMA)."""
    return {"type": "object", "properties": {axis.name: axis.json_schema() for axis in AXES},
            "required": [axis.name for axis in AXES if axis.required]}


def problem(cell: Mapping[str, Any]) -> Optional[Tuple[str, str]]:
    """(axis name, what is wrong) of a cell's first bad value, or None (absent optional axes are fine)."""
    for axis in AXES:
        if axis.name in cell:
            found = axis.problem(cell[axis.name])
            if found:
                return axis.name, found
    return None


def to_dict(cell: Cell) -> Dict[str, Any]:
    """A cell's JSON form: every axis, but an ``omit_default`` one at its default."""
    return {axis.name: getattr(cell, axis.name) for axis in AXES
            if not (axis.omit_default and getattr(cell, axis.name) == axis.default)}


def cross_product(models: Sequence[Mapping[str, Any]], values: Mapping[str, Any]) -> List[Cell]:
    """Every cell: each model entry (its "models" axes) x each value of the list axes (PRODUCT_ORDER,
    ``values`` by source key: "dtypes", ...), with the matrix-wide axes' values; a compiled-only axis
    keeps its default in eager cells."""
    cells: List[Dict[str, Any]] = [dict(model) for model in models]
    for name in PRODUCT_ORDER:
        axis = BY_NAME[name]
        cells = [dict(cell, **{name: value}) for cell in cells for value in values[axis.source]]
    single = {axis.name: values[axis.source] for axis in AXES
              if axis.source != "models" and not axis.many and axis.source in values}
    return [make_cell({**single, **cell}) for cell in cells]


def make_cell(fields: Mapping[str, Any]) -> Cell:
    """A Cell of the axes' values (defaults where left out); compiled-only axes at their default in eager."""
    values = {axis.name: fields.get(axis.name, axis.default) for axis in AXES
              if axis.name in fields or axis.default is not REQUIRED}
    if not Mode(values["mode"]).compiled:
        values.update({axis.name: axis.default for axis in AXES if axis.compiled_only})
    return Cell(**values)


def _replace(cell: CellT, **changes: Any) -> CellT:
    if isinstance(cell, Cell):
        return dataclasses.replace(cell, **changes)
    return {**cell, **changes}


def speedup_baseline(cell: CellT) -> Optional[CellT]:
    """The eager cell a compiled cell's speed-up is measured against; None for an eager cell."""
    if not Mode(_value(cell, BY_NAME["mode"])).compiled:
        return None
    return _replace(cell, mode=Mode.EAGER.value, **{axis.name: axis.default for axis in AXES if axis.compiled_only})


def mode_change_baseline(cell: CellT) -> Optional[CellT]:
    """The ``default``-mode cell of the same other axes a compiled mode is judged against; None for
    eager and default cells."""
    mode = Mode(_value(cell, BY_NAME["mode"]))
    if not mode.compiled or mode is Mode.DEFAULT:
        return None
    return _replace(cell, mode=Mode.DEFAULT.value)


def setting_axes() -> Tuple[Axis, ...]:
    """The axes that declare their matrix-wide setting here (runner.settings adds them)."""
    return tuple(axis for axis in AXES if axis.setting_help is not None)
