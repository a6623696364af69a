"""Every setting declared once: name, default, type, allowed values, help text.

The matrix JSON Schema (``matrixbench.matrix_schema``), the matrix's defaults
(``matrixbench.matrix``), the CLI override options (``matrixbench.cli``), the runner's
defaults and checks (``runner.cells_file``, ``runner.cli``) and the record's ``settings`` block
(``runner.schema``) all derive from the declarations below. Stdlib only.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple

from runner.core import ATTENTION, DEVICES, DTYPES, MODES, SIZES, WEIGHTS

JSON = Dict[str, Any]
_KINDS = {"integer": "an integer", "number": "a number", "string": "a string", "boolean": "true or false"}


@dataclass(frozen=True)
class Setting:
    """One setting. ``many``: a list of values (a matrix axis); ``flag``: its CLI override."""

    name: str
    help: str
    kind: str                                  # "integer", "number", "string" or "boolean"
    default: Any = None
    choices: Optional[Tuple[Any, ...]] = None
    minimum: Optional[float] = None
    exclusive_minimum: bool = False            # minimum itself not allowed
    maximum: Optional[float] = None            # sane limit: past it a value is a typo, not a measurement
    nullable: bool = False
    many: bool = False
    min_items: int = 1                         # of a list (many); 0: an empty list means "no such axis"
    required: bool = False                     # matrix.yaml must give it (default: for the runner's shorthand)
    flag: Optional[str] = None                 # the override flag of `matrixbench validate/run`
    runner: bool = False                       # in the runner's settings block
    matrix: bool = True                        # a key of matrix.yaml
    auto: bool = False                         # the string "auto" is allowed too (chosen at run time)

    def item_schema(self) -> JSON:
        """The JSON Schema of one value."""
        if self.auto:
            return {"anyOf": [{"const": "auto"}, Setting(self.name, self.help, self.kind, minimum=self.minimum,
                                                        maximum=self.maximum).item_schema()]}
        if self.choices is not None:
            return {"enum": list(self.choices) + ([None] if self.nullable else [])}
        schema: JSON = {"type": [self.kind, "null"] if self.nullable else self.kind}
        if self.minimum is not None:
            schema["exclusiveMinimum" if self.exclusive_minimum else "minimum"] = self.minimum
        if self.maximum is not None:
            schema["maximum"] = self.maximum
        return schema

    def json_schema(self) -> JSON:
        if self.many:
            return {"type": "array", "minItems": self.min_items, "uniqueItems": True, "items": self.item_schema()}
        return self.item_schema()

    def problem(self, value: Any) -> Optional[str]:
        """Why ``value`` is not allowed ("must be ..., got ..."), or None (stdlib, for the runner)."""
        if value is None and self.nullable:
            return None
        if self.many:
            fits = isinstance(value, list) and len(value) >= self.min_items
            bad = [self.problem_of_item(item) for item in value] if fits else ["x"]
            kind = "a list" if self.min_items == 0 else "a non-empty list"
            return None if not any(bad) else f"must be {kind} of {self.describe()}, got {value!r}"
        return self.problem_of_item(value)

    def problem_of_item(self, value: Any) -> Optional[str]:
        return None if _allowed(self, value) else f"must be {self.describe()}, got {value!r}"

    def describe(self) -> str:
        """What a value must be: "one of [a, b]", "an integer >= 1", "a number > 0 or null"."""
        if self.auto:
            return "auto or " + Setting(self.name, self.help, self.kind, minimum=self.minimum,
                                        maximum=self.maximum).describe()
        if self.choices is not None:
            text = f"one of [{', '.join(map(str, self.choices))}]"
        else:
            text = _KINDS[self.kind]
            if self.minimum is not None:
                text += f" {'>' if self.exclusive_minimum else '>='} {self.minimum:g}"
            if self.maximum is not None:
                text += f" and <= {self.maximum:,}"
        return text + (" or null" if self.nullable else "")


def _allowed(setting: Setting, value: Any) -> bool:
    if setting.auto and value == "auto":
        return True
    if setting.choices is not None:
        return value in setting.choices
    if isinstance(value, bool) or setting.kind in ("boolean", "string"):
        return isinstance(value, {"boolean": bool, "string": str}.get(setting.kind, type(None)))
    if setting.kind == "integer" and not isinstance(value, int):
        return False
    if not isinstance(value, (int, float)):
        return False
    if setting.maximum is not None and value > setting.maximum:
        return False
    if setting.minimum is None:
        return True
    return value > setting.minimum if setting.exclusive_minimum else value >= setting.minimum


# Maxima: sane limits (10**12 iterations fail as MemoryError, not as a measurement).
SETTINGS: Tuple[Setting, ...] = (
    Setting("weights", "Weights for every model: random (shipped config, no network) or pretrained.",
            "string", default="random", choices=WEIGHTS, flag="--weights"),
    Setting("size", "Model size: full, or tiny (a few-layer variant, for CPU tests).",
            "string", default="full", choices=SIZES, flag="--size"),
    Setting("batch_sizes", "Batch sizes, comma-separated (e.g. 1,4).",
            "integer", default=(1,), minimum=1, maximum=4096, many=True, required=True, flag="--batch-sizes"),
    Setting("modes", f"Modes, comma-separated, from {', '.join(MODES)}.",
            "string", default=("eager", "default"), choices=MODES, many=True, required=True, flag="--modes"),
    Setting("fullgraph", "torch.compile(fullgraph=True) for the compiled modes.",
            "boolean", default=False),
    Setting("attention", "Attention implementation of every model: eager (default: the one every image "
            "can run, so images compare torch, not transformers), sdpa (eager where a model has no SDPA "
            "path), or auto (transformers' own choice). Records say which ran.",
            "string", default="eager", choices=ATTENTION, flag="--attention"),
    Setting("dtypes", f"Dtypes, comma-separated, from {', '.join(DTYPES)}.",
            "string", default=("float32",), choices=DTYPES, many=True, flag="--dtypes"),
    Setting("repeats", "Processes per cell (repeats), each its own fresh process and record; 3 for a "
            "comparison that should survive a rerun.",
            "integer", default=1, minimum=1, maximum=1000, flag="--repeats"),
    Setting("iterations", "Timed iterations per cell.",
            "integer", default=300, minimum=1, maximum=1_000_000, flag="--iterations", runner=True),
    Setting("warmup", "Warm-up iterations per cell, after the first call (at least 3 run).",
            "integer", default=10, minimum=0, maximum=100_000, flag="--warmup", runner=True),
    Setting("timeout_s", "Per-cell time limit in seconds, compile included.",
            "number", default=900, minimum=0, exclusive_minimum=True, maximum=7 * 24 * 3600,
            flag="--timeout", runner=True),
    Setting("device", "auto: the GPU when there is one, else the CPU; cuda fails without a GPU.",
            "string", default="auto", choices=DEVICES, runner=True, matrix=False),
    Setting("accuracy_tolerance", "Largest relative error of compiled vs eager outputs that passes "
            "(null: the dtype's default, see runner.tolerance).",
            "number", default=None, minimum=0, nullable=True, runner=True),
    Setting("cv_threshold", "stdev/mean above which a cell's timing is flagged noisy.",
            "number", default=0.1, minimum=0, exclusive_minimum=True, runner=True),
    Setting("slots", "Runners at once: auto (one per GPU on a GPU run, one on a CPU run) or a count; "
            "each slot gets its own GPU and a disjoint set of CPU cores (matrixbench.placement).",
            "integer", default="auto", minimum=1, maximum=1024, auto=True, flag="--slots"),
    Setting("calibrate", "Measure the slots' interference before the matrix (matrixbench.calibrate): the "
            "calibration cells run on each slot alone, then on every slot at once, once per repeat; the "
            "report's calibration table gives loaded / alone per cell with its interval. Needs 2 or more slots.",
            "boolean", default=False, flag="--calibrate"),
    Setting("calibration_models", "The models --calibrate runs, comma-separated, each at batch size 1, eager "
            "and default, in the matrix's size and first dtype: a model of the matrix, or a shipped one (resnet "
            "is ResNet-50; tiny with size tiny).",
            "string", default=("resnet",), many=True, flag="--calibration-models"),
    Setting("exclusive_timing", "With slots: compile in parallel but time one slot at a time (the run's "
            "timing board, runner.timing_board), for zero interference between slots at some wall time; "
            "the wait counts against timeout_s. Records say which mode they ran under.",
            "boolean", default=False, flag="--exclusive-timing"),
    Setting("attribution", "Split each change between two images that differ in torch and in transformers into "
            "torch's share and transformers' share: derives and runs bridge images (the torch of one side with "
            "the transformers of the other; matrixbench.attribution). `run --dry-run` prints what it costs.",
            "boolean", default=False, flag="--attribution"),
    Setting("gpu_types", "GPU types to run every cell on, comma-separated, as Ray names them (A100, V100, "
            "T4, H100, ...): a matrix axis, only with --backend ray; records land in "
            "results/<run>/<gpu_type>/<image>/.",
            "string", default=(), many=True, min_items=0, flag="--gpu-types"),
)
BY_NAME: Dict[str, Setting] = {setting.name: setting for setting in SETTINGS}
RUNNER_SETTINGS: Tuple[Setting, ...] = tuple(s for s in SETTINGS if s.runner)
MATRIX_SETTINGS: Tuple[Setting, ...] = tuple(s for s in SETTINGS if s.matrix)
OVERRIDES: Tuple[Setting, ...] = tuple(s for s in SETTINGS if s.flag)

# The runner's settings block when the cells file leaves a setting out.
DEFAULT_SETTINGS: JSON = {s.name: s.default for s in RUNNER_SETTINGS}


def matrix_defaults() -> JSON:
    """Optional matrix.yaml keys and the value they take when left out (lists as lists)."""
    return {s.name: list(s.default) if s.many else s.default
            for s in MATRIX_SETTINGS if not s.required}
