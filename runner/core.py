"""The typed core both sides share: the vocabularies, one Status, a Cell and a Record.

Stdlib only (the host imports it, and so does the runner in every image, Python 3.10 included).
``to_dict()`` gives the JSON on disk, exactly as ``runner.schema.RECORD_SCHEMA`` says;
``from_dict()`` reads it back. Records of an older schema version are converted on read
(``upgrade_record``); unknown versions are refused by ``runner.schema.read_record``.
"""
from __future__ import annotations

import enum
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Dict, Mapping, Optional, Tuple, Union

# The record format. History: 1 (cells carried a test-only ``fault``; ``timing.compile_s``);
# 2 (no ``fault``; ``timing.first_call_s``: the first call, timed on its own, eager cells too; an
# optional top-level ``repeat``, the 0-based index of the process among the cell's repeats, missing = 0);
# 3 (optional fields, absent in older records: ``timing.energy`` and ``timing.violations`` (runner.energy),
# and issue 22's ``timing.regime``, ``timing.windows``, ``timing.cudagraphs.graphs_per_call``, the accuracy
# outputs' float64 judgement, ``precision.tf32_available``, ``environment.gpu_capability``).
# 4 (issue 32, optional, absent in older records: ``timing.host`` (runner.host: launch times beside
# event times, stalls, steal, context switches, speed reference), ``timing.paired`` (eager and compiled
# blocks in one process), ``timing.extended`` (calls beyond the first N: minimum duration, noise stop);
# the settings ``paired``, ``min_time_s``, ``max_time_s``, ``target_stdrel``).
# 5 (issue 34, optional, absent in older records and in records of cells not run in turns: ``timing.turns``,
# the blocks a cell's process timed taking turns with another image's process, runner.turns).
SCHEMA_VERSION = 5
SUPPORTED_VERSIONS: Tuple[int, ...] = (1, 2, 3, 4, 5)

DTYPES = ("float32", "float16", "bfloat16")
WEIGHTS = ("random", "pretrained")
SIZES = ("full", "tiny")
TASKS = ("image-classification", "image-segmentation", "object-detection")
DEVICES = ("auto", "cuda", "cpu")            # what may be asked for
USED_DEVICES = ("cuda", "cpu")               # what a record says ran
ACCURACY_STATUSES = ("pass", "fail", "nan", "skipped")
# Attention implementations a cell may ask for (runner.models explains the default, eager).
ATTENTION = ("eager", "sdpa", "auto")
# What a GPU cell's mean means (timing.regime, runner.syncs.timing_regime).
PIPELINED = "pipelined_throughput"
PER_CALL = "per_call_latency"
REGIMES = (PIPELINED, PER_CALL)

JSON = Dict[str, Any]


class Status(str, enum.Enum):
    """How a cell ended. A str, so records hold the plain value ("ok", "oom", ...)."""

    OK = "ok"
    OOM = "oom"
    ERROR = "error"
    TIMEOUT = "timeout"
    CRASHED = "crashed"

    def __str__(self) -> str:
        return self.value


STATUSES = tuple(status.value for status in Status)


class Mode(str, enum.Enum):
    """How a cell runs its model: eager (the baseline every speed-up is measured against) or one of
    torch.compile's modes. A str, so cells and records hold the plain value ("eager", "default", ...)."""

    EAGER = "eager"
    DEFAULT = "default"
    REDUCE_OVERHEAD = "reduce-overhead"
    MAX_AUTOTUNE = "max-autotune"

    def __str__(self) -> str:
        return self.value

    @property
    def compiled(self) -> bool:
        """Run through torch.compile (every mode but the eager baseline)."""
        return self is not Mode.EAGER

    @property
    def cudagraphs(self) -> bool:
        """torch.compile's modes that capture CUDA graphs (each call a cudagraph-trees step on a GPU)."""
        return self in (Mode.REDUCE_OVERHEAD, Mode.MAX_AUTOTUNE)


MODES = tuple(mode.value for mode in Mode)


def cell_id(cell: Union["Cell", Mapping[str, Any]]) -> str:
    """The stable name of a cell: its record's file stem and its key for resume (runner.axes)."""
    from runner import axes  # axes imports this module: the axes' declaration names the cell

    return axes.cell_id(cell)


@dataclass(frozen=True)
class Cell:
    """One point of the matrix: a model at one batch size, mode and dtype (CELL_SCHEMA); each field an
    axis of runner.axes, which declares its role and default."""

    model: str
    task: str
    weights: str
    size: str
    batch_size: int
    mode: str
    fullgraph: bool
    dtype: str
    model_id: Optional[str] = None
    config_path: Optional[str] = None
    attention: Optional[str] = None   # None: not recorded (cells before it existed ran transformers' choice)
    tf32: bool = False                # TF32 matmuls (runner.precision); absent from a cell's JSON when off
    model_hash: Optional[str] = None  # a local model's files (runner.registry.local_model_hash); absent: none
    revision: Optional[str] = None    # a hub model's revision (branch, tag or commit) every from_pretrained gets

    @property
    def id(self) -> str:
        return cell_id(self)

    def to_dict(self) -> JSON:
        """Its fields as a dict (all plain values: a shallow copy, much faster than ``asdict``), but an
        axis declared ``omit_default`` at its default (runner.axes.to_dict)."""
        from runner import axes

        return axes.to_dict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Cell":
        """A cell from its JSON form (unchecked: ``runner.cells_file.validate_cell`` checks)."""
        return cls(**{f.name: data[f.name] for f in fields(cls) if f.name in data})


def repeat_stem(cell_id_: str, repeat: int = 0) -> str:
    """A repeat's record file stem: ``<cell_id>`` for repeat 0, ``<cell_id>.r<k>`` for k >= 1."""
    return cell_id_ if repeat == 0 else f"{cell_id_}.r{repeat}"


@dataclass(frozen=True)
class Repeat:
    """One process's measurement of a cell: the cell and the 0-based repeat index."""

    cell: Cell
    index: int = 0

    @property
    def id(self) -> str:
        """The record's file stem (``repeat_stem``)."""
        return repeat_stem(self.cell.id, self.index)


@dataclass(frozen=True)
class CellError:
    """What went wrong in a cell that is not ok: the report's footnote."""

    type: str
    message: str
    traceback: Optional[str] = None

    def to_dict(self) -> JSON:
        return asdict(self)


@dataclass
class Record:
    """The result of one cell (RECORD_SCHEMA). The nested blocks stay JSON objects."""

    cell: Cell
    device: str
    settings: JSON
    precision: JSON
    environment: JSON
    started_at: str
    status: Status = Status.ERROR
    error: Optional[CellError] = None
    timing: Optional[JSON] = None
    memory: Optional[JSON] = None
    dynamo: Optional[JSON] = None
    accuracy: Optional[JSON] = None
    attention: Optional[JSON] = None      # {requested, used}: the attention implementation
    duration_s: Optional[float] = None
    repeat: int = 0                              # which of the cell's processes (0-based)
    placement: Optional[JSON] = None            # the host's slot and this process's affinity (v2, optional)
    calibration: Optional[JSON] = None          # {phase, slots} of an interference calibration (v2, optional)
    model_commit: Optional[str] = None          # the hub commit the model's files came from (optional; absent: none)
    extra: JSON = field(default_factory=dict)   # v2 fields this version does not model

    @property
    def cell_id(self) -> str:
        return self.cell.id

    def to_dict(self) -> JSON:
        data: JSON = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "extra"}
        for optional in ("placement", "calibration", "model_commit"):
            if data[optional] is None:
                del data[optional]                  # outside slots and calibrations a record is as before
        data.update(self.extra)
        data.update(schema_version=SCHEMA_VERSION, cell_id=self.cell_id, cell=self.cell.to_dict(),
                    status=self.status.value, error=self.error.to_dict() if self.error else None)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Record":
        """A record from its JSON form; older versions are converted first."""
        data = upgrade_record(data)
        known = {f.name for f in fields(cls)}
        values = {key: value for key, value in data.items() if key in known}
        values.update(cell=Cell.from_dict(data["cell"]), status=Status(data["status"]),
                      error=CellError(**data["error"]) if data.get("error") else None,
                      extra={key: value for key, value in data.items()
                             if key not in known and key not in ("schema_version", "cell_id")})
        return cls(**values)


def upgrade_record(data: Mapping[str, Any]) -> JSON:
    """A record of any supported version as the current version (a new dict; v5 is returned as is).

    v1 -> v2: the cell's ``fault`` (a test hook, always null in real runs) is dropped,
    ``timing.compile_s`` is ``timing.first_call_s`` (it always was the first call, eager too),
    and the record is repeat 0 (one process per cell).
    v2 -> v3: nothing changes; v3 adds the optional ``timing.energy`` and ``timing.violations``
    (runner.energy), which an older record lacks: the report shows them as absent, not as zero.
    Issue 22's v3 fields (timing.regime, timing.windows, ...) are optional too, absent in older records.
    v3 -> v4: nothing changes; v4's ``timing.host``, ``timing.paired`` and ``timing.extended`` are optional
    (runner.host.host_view reads the host fields of any record, unknown ones as None).
    v4 -> v5: nothing changes; v5's ``timing.turns`` is optional: absent, it reads as null (``timing.get("turns")``),
    as in a v5 record of a cell not run in turns.
    """
    record = dict(data)
    if record.get("schema_version") == 1:
        record["cell"] = {k: v for k, v in record["cell"].items() if k != "fault"}
        if isinstance(record.get("timing"), dict):
            record["timing"] = {("first_call_s" if k == "compile_s" else k): v for k, v in record["timing"].items()}
        record["schema_version"] = 2
        record.setdefault("repeat", 0)
    if record.get("schema_version") in (2, 3, 4):
        record["schema_version"] = SCHEMA_VERSION
    return record
